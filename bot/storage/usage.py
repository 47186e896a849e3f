"""Usage over a time window, read from the runs table: what runs-per-hour and the daily token
budget count. A run counts against its `account` (the chat it was made for: a worker's parent
chat, an isolated job's chat) and its `requester` (the person who asked), wherever it ran."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from bot.storage.base import RepositoryBase
from bot.storage.models import RunModel


@dataclass(frozen=True, slots=True)
class Charge:
    """Whose spend to count: a chat `account` (with_topics: and the sessions below it) or the
    person `requester`, as `UsageRepository.window_usage` takes them."""

    account: str | None = None
    with_topics: bool = False
    requester: str | None = None


@dataclass(frozen=True, slots=True)
class WindowUsage:
    run_starts: list[datetime]
    """Start times of the runs in the window, oldest first."""
    tokens: int
    """Input + output tokens of the runs that spent in the window (those runs, and one begun
    before it that was still running in it); a run still going counts what it has reported
    between its turns."""


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _charged_to(account: str | None, with_topics: bool, requester: str | None) -> ColumnElement[bool]:
    if requester is not None:
        return RunModel.requester == requester
    if account is None:
        raise ValueError("usage needs an account or a requester")
    match: ColumnElement[bool] = RunModel.account == account
    if with_topics:
        pattern = _escape_like(account) + ":%"
        match = or_(match, RunModel.account.like(pattern, escape="\\"))
    return match


LONGEST_RUN = timedelta(days=1)
"""How far before a window a run that was still spending in it may have started."""


def _tokens(match: ColumnElement[bool], since: datetime) -> Select[tuple[int]]:
    """Tokens of the runs that spent in the window: started in it, or started before and
    still running (or ended) in it. Such a run counts whole (its turns carry no times):
    erring high keeps a run admitted before midnight from spending on unchecked after it."""
    spent = func.coalesce(func.sum(RunModel.input_tokens + RunModel.output_tokens), 0)
    in_window = or_(RunModel.started_at >= since, RunModel.finished_at.is_(None), RunModel.finished_at >= since)
    return select(spent).where(match, RunModel.started_at >= since - LONGEST_RUN, in_window)


class UsageRepository(RepositoryBase):
    async def window_usage(
        self, since: datetime, *, account: str | None = None, with_topics: bool = False, requester: str | None = None
    ) -> WindowUsage:
        """Runs started at or after `since` charged to `account` (with_topics: also to the
        sessions below it, `group:telegram:-100…:<topic>`, so a group's topics share one
        budget) or, with `requester`, asked for by that person in any chat."""
        match = _charged_to(account, with_topics, requester)
        async with self._tx() as s:
            starts = list(
                await s.scalars(
                    select(RunModel.started_at)
                    .where(match, RunModel.started_at >= since)
                    .order_by(RunModel.started_at)
                )
            )
            tokens = await s.scalar(_tokens(match, since))
        # int(): PostgreSQL returns SUM(bigint) as Decimal.
        return WindowUsage(starts, int(tokens or 0))

    async def window_tokens(
        self, since: datetime, *, account: str | None = None, with_topics: bool = False, requester: str | None = None
    ) -> int:
        """Input + output tokens of the runs `window_usage` counts (one aggregate: what the
        between-turns budget check reads)."""
        (tokens,) = await self.tokens_charged(since, [Charge(account, with_topics, requester)])
        return tokens

    async def tokens_charged(self, since: datetime, charges: Sequence[Charge]) -> list[int]:
        """`window_tokens` of each charge, in one statement (the check before every model
        call reads the person's and the group's at once)."""
        if not charges:
            return []
        subqueries = [
            _tokens(_charged_to(c.account, c.with_topics, c.requester), since).scalar_subquery() for c in charges
        ]
        statement = select(*subqueries)
        # A synchronous body (bot.storage.writer): a fraction of an ORM session's cost.
        row = await self._transact(lambda conn: conn.execute(statement).one())
        return [int(v or 0) for v in row]
