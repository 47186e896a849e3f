"""Run metrics (one row per run), their sums over a window, notices sent once, and each
session's queue mode."""

from __future__ import annotations

import functools

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, func, select, update
from sqlalchemy.engine import Connection

from agent_core.text import clean_text
from bot.storage.base import RepositoryBase, dialect_insert, rowcount
from bot.storage.inbox import InboxRow, _row as _inbox_row
from bot.storage.models import InboxModel, NoticeSentModel, RunMetricsModel, RunModel, SessionModel
from bot.storage.records import RunRow
from bot.storage.runs import _run_row


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """What one run cost and how it went. `errors` is 1 when the run failed (not a user's
    /stop), `tool_errors` counts tool results that were errors; `cost_usd` is at the
    prices configured for the model with their source (None when they are not: unknown)."""

    run_id: str
    session_key: str
    status: str
    model: str
    started_at: datetime
    duration_s: float
    first_token_s: float | None
    turns: int
    tool_calls: int
    tool_errors: int
    tool_seconds: float
    errors: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    fallbacks: int
    cost_usd: float | None
    web_searches: int = 0


@dataclass(frozen=True, slots=True)
class MetricsTotals:
    """Sums over runs (averages where a sum means nothing)."""

    runs: int = 0
    duration_s: float = 0.0
    first_token_avg_s: float | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_seconds: float = 0.0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    fallbacks: int = 0
    cost_usd: float = 0.0
    """Of the runs whose cost is known (see `unpriced_runs`)."""
    unpriced_runs: int = 0
    """Runs of a model without configured prices: their cost is unknown, not zero."""
    web_searches: int = 0

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of prompt tokens read from cache (None before any prompt)."""
        prompt = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / prompt if prompt else None


_M = RunMetricsModel
_SUMS = (
    func.count(_M.run_id),
    func.coalesce(func.sum(_M.duration_s), 0.0),
    func.avg(_M.first_token_s),
    func.coalesce(func.sum(_M.turns), 0),
    func.coalesce(func.sum(_M.tool_calls), 0),
    func.coalesce(func.sum(_M.tool_errors), 0),
    func.coalesce(func.sum(_M.tool_seconds), 0.0),
    func.coalesce(func.sum(_M.errors), 0),
    func.coalesce(func.sum(_M.input_tokens), 0),
    func.coalesce(func.sum(_M.output_tokens), 0),
    func.coalesce(func.sum(_M.cache_read_tokens), 0),
    func.coalesce(func.sum(_M.cache_write_tokens), 0),
    func.coalesce(func.sum(_M.fallbacks), 0),
    func.coalesce(func.sum(_M.cost_usd), 0.0),
    func.coalesce(func.sum(case((_M.cost_usd.is_(None), 1), else_=0)), 0),
    func.coalesce(func.sum(_M.web_searches), 0),
)


# measure_run's statements, built once (it runs after every run).
_SELECT_RUN = select(*RunModel.__table__.columns).where(RunModel.id == bindparam("run_id"))
_FAILED_SHARE = select(
    func.count(_M.run_id), func.coalesce(func.sum(case((_M.errors > 0, 1), else_=0)), 0)
).where(_M.started_at >= bindparam("since", type_=_M.__table__.c.started_at.type))


@functools.cache
def _upsert_metrics(dialect: str) -> Any:
    insert = dialect_insert(dialect, RunMetricsModel)
    return insert.on_conflict_do_update(
        index_elements=["run_id"],
        set_={f.name: insert.excluded[f.name] for f in fields(RunMetrics) if f.name != "run_id"},
    )


def _totals(row: tuple[object, ...]) -> MetricsTotals:
    # int()/float(): PostgreSQL returns SUM(bigint) as Decimal.
    values = []
    for f, v in zip(fields(MetricsTotals), row, strict=True):
        if f.name == "first_token_avg_s":
            values.append(None if v is None else float(v))  # type: ignore[arg-type]
        elif isinstance(f.default, float):
            values.append(float(v))  # type: ignore[arg-type]
        else:
            values.append(int(v))  # type: ignore[call-overload]
    return MetricsTotals(*values)


class MetricsRepository(RepositoryBase):
    async def record_run_metrics(self, m: RunMetrics) -> None:
        """Store a run's metrics; a second record for the same run replaces the first."""
        values = {f.name: getattr(m, f.name) for f in fields(RunMetrics)}
        values["model"] = clean_text(m.model)[:255]
        insert = self._insert(RunMetricsModel).values(**values)
        async with self._tx() as s:
            await s.execute(
                insert.on_conflict_do_update(
                    index_elements=["run_id"], set_={k: v for k, v in values.items() if k != "run_id"}
                )
            )

    async def measure_run(
        self, run_id: str, build: Callable[[RunRow], RunMetrics], failed_since: datetime
    ) -> tuple[RunMetrics | None, int, int]:
        """One transaction after a run: read its row, store `build(row)` as its metrics, and
        count (runs, failed runs) started since `failed_since` — only when this run failed
        (the failure-share notice is checked when a failure lands; (0, 0) after a success,
        saving a scan of the hour's rows per run). None when the
        run has no row (it never started)."""
        dialect = self._dialect

        def body(conn: Connection) -> tuple[RunMetrics | None, int, int]:
            row = conn.execute(_SELECT_RUN, {"run_id": run_id}).first()
            if row is None:
                return None, 0, 0
            m = build(_run_row(row))
            values = {f.name: getattr(m, f.name) for f in fields(RunMetrics)}
            values["model"] = clean_text(m.model)[:255]
            conn.execute(_upsert_metrics(dialect), values)
            if m.errors <= 0:
                return m, 0, 0
            runs, failures = conn.execute(_FAILED_SHARE, {"since": failed_since}).one()
            return m, int(runs), int(failures)

        return await self._transact(body)

    async def run_metrics(self, run_id: str) -> RunMetrics | None:
        async with self._tx() as s:
            m = await s.get(RunMetricsModel, run_id)
            return None if m is None else RunMetrics(**{f.name: getattr(m, f.name) for f in fields(RunMetrics)})

    async def metrics_totals(self, since: datetime, *, session_key: str | None = None) -> MetricsTotals:
        """Sums over runs started at or after `since` (one session's, or all)."""
        query = select(*_SUMS).where(_M.started_at >= since)
        if session_key is not None:
            query = query.where(_M.session_key == session_key)
        async with self._tx() as s:
            return _totals(tuple((await s.execute(query)).one()))

    async def metrics_by_session(self, since: datetime) -> dict[str, MetricsTotals]:
        """Sums per session over runs started at or after `since`, busiest first."""
        query = (
            select(_M.session_key, *_SUMS)
            .where(_M.started_at >= since)
            .group_by(_M.session_key)
            .order_by(func.count(_M.run_id).desc(), _M.session_key)
        )
        async with self._tx() as s:
            return {row[0]: _totals(tuple(row[1:])) for row in await s.execute(query)}

    async def failed_share(self, since: datetime) -> tuple[int, int]:
        """(runs, failed runs) started at or after `since`."""
        runs, failed = await self._transact(lambda conn: conn.execute(_FAILED_SHARE, {"since": since}).one())
        return int(runs), int(failed)

    async def claim_notice(self, kind: str, ref: str) -> bool:
        """True exactly once per (kind, ref), across restarts: the caller may send it."""
        async with self._tx() as s:
            result = await s.execute(
                self._insert(NoticeSentModel)
                .values(kind=kind, ref=clean_text(ref)[:128], sent_at=self._now())
                .on_conflict_do_nothing(index_elements=["kind", "ref"])
            )
            return rowcount(result) == 1

    async def set_queue_mode(self, session_key: str, mode: str | None) -> bool:
        """The session's queue mode (None = the configured default). False for an unknown
        session (call ensure_session first)."""
        async with self._tx() as s:
            result = await s.execute(
                update(SessionModel)
                .where(SessionModel.key == session_key)
                .values(queue_mode=mode)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result) == 1

    async def queue_modes(self) -> dict[str, str]:
        """Every session's chosen queue mode (sessions on the default are left out)."""
        async with self._tx() as s:
            rows = await s.execute(
                select(SessionModel.key, SessionModel.queue_mode).where(SessionModel.queue_mode.is_not(None))
            )
            return {key: mode for key, mode in rows}

    async def set_voice_replies(self, session_key: str, on: bool) -> bool:
        """`/voice on|off` for the session; False for an unknown session."""
        async with self._tx() as s:
            result = await s.execute(
                update(SessionModel)
                .where(SessionModel.key == session_key)
                .values(voice_replies=on)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result) == 1

    async def voice_replies(self, session_key: str) -> bool:
        async with self._tx() as s:
            value = await s.scalar(select(SessionModel.voice_replies).where(SessionModel.key == session_key))
            return bool(value)

    # -- resume after a crash ------------------------------------------------------------

    async def interrupted_runs(self, since: datetime) -> list[RunRow]:
        """Runs a crash cut off (marked `interrupted` at start) that finished at or after
        `since`, oldest first."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(RunModel)
                .where(RunModel.status == "interrupted", RunModel.finished_at >= since)
                .order_by(RunModel.started_at)
            )
            return [_run_row(m) for m in rows]

    async def inbox_for_run(self, run_id: str) -> list[InboxRow]:
        """The inbox messages the run `run_id` answered (kept a day after they are done)."""
        async with self._tx() as s:
            rows = await s.scalars(select(InboxModel).where(InboxModel.run_id == run_id).order_by(InboxModel.id))
            return [_inbox_row(m) for m in rows]
