"""Usage over a time window, read from the runs table: what runs-per-hour and the daily token
budget count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, or_, select

from bot.storage.base import RepositoryBase
from bot.storage.models import RunModel


@dataclass(frozen=True, slots=True)
class WindowUsage:
    run_starts: list[datetime]
    """Start times of the runs in the window, oldest first."""
    tokens: int
    """Input + output tokens of those runs (a run still going counts what it has reported)."""


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class UsageRepository(RepositoryBase):
    async def window_usage(self, session_key: str, since: datetime, *, with_topics: bool = False) -> WindowUsage:
        """Runs of `session_key` started at or after `since`; with_topics also counts the
        sessions below it (`group:telegram:-100…:<topic>`), so a group's topics share one
        budget."""
        match = RunModel.session_key == session_key
        if with_topics:
            pattern = _escape_like(session_key) + ":%"
            match = or_(match, RunModel.session_key.like(pattern, escape="\\"))
        async with self._tx() as s:
            starts = list(
                await s.scalars(
                    select(RunModel.started_at)
                    .where(match, RunModel.started_at >= since)
                    .order_by(RunModel.started_at)
                )
            )
            tokens = await s.scalar(
                select(func.coalesce(func.sum(RunModel.input_tokens + RunModel.output_tokens), 0)).where(
                    match, RunModel.started_at >= since
                )
            )
        # int(): PostgreSQL returns SUM(bigint) as Decimal.
        return WindowUsage(starts, int(tokens or 0))
