"""Read-only, paged queries for the operations layer's views (dashboard, CLI): sessions, a
session's runs, text search over runs, one run's timeline. Every list is paged with LIMIT;
windows and filters use the existing indexes (bench/bench_dashboard.py: every page well under
300 ms with 10,000 runs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, case, cast, func, or_, select

from bot.storage.base import RepositoryBase
from bot.storage.models import (
    ApprovalModel,
    MessageModel,
    RunMetricsModel,
    RunModel,
    SessionModel,
    ToolCallModel,
)
from bot.storage.records import RunRow, ToolCallRow, TranscriptRow
from bot.storage.runs import _run_row, _tool_call_row
from bot.storage.metrics import _SUMS, MetricsTotals, _totals
from agent_core.ports import ApprovalRecord
from bot.storage.approvals import _approval_record


@dataclass(frozen=True, slots=True)
class SessionSummary:
    key: str
    scope: str
    platform: str | None
    chat_id: str | None
    runs: int
    last_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunTimeline:
    run: RunRow
    messages: list[TranscriptRow]
    tool_calls: list[ToolCallRow]
    approvals: list[ApprovalRecord]
    first_token_s: float | None
    cost_usd: float | None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class BrowseRepository(RepositoryBase):
    async def session_summaries(self, *, limit: int = 50, offset: int = 0) -> list[SessionSummary]:
        """Sessions, the most recently active first (activity from run_metrics' index)."""
        last = (
            select(
                RunMetricsModel.session_key.label("key"),
                func.count().label("runs"),
                func.max(RunMetricsModel.started_at).label("last_at"),
            )
            .group_by(RunMetricsModel.session_key)
            .subquery()
        )
        query = (
            select(SessionModel, last.c.runs, last.c.last_at)
            .outerjoin(last, last.c.key == SessionModel.key)
            .order_by(last.c.last_at.desc().nulls_last(), SessionModel.key)
            .limit(limit)
            .offset(offset)
        )
        async with self._tx() as s:
            rows = (await s.execute(query)).all()
        return [
            SessionSummary(m.key, m.scope, m.platform, m.chat_id, runs or 0, _aware(last_at))
            for m, runs, last_at in rows
        ]

    async def runs_page(
        self, *, session_key: str | None = None, search: str | None = None, limit: int = 50, offset: int = 0,
        status: str | None = None,
    ) -> list[RunRow]:
        """Runs, newest first; `search` matches the run's transcript text (case-insensitive)."""
        query = select(RunModel).order_by(RunModel.started_at.desc(), RunModel.id).limit(limit).offset(offset)
        if session_key is not None:
            query = query.where(RunModel.session_key == session_key)
        if status is not None:
            query = query.where(RunModel.status == status)
        if search:
            pattern = f"%{_escape_like(search.lower())}%"
            hits = select(MessageModel.run_id).where(
                MessageModel.run_id.is_not(None),
                func.lower(cast(MessageModel.content, String)).like(pattern, escape="\\"),
            )
            tools = select(ToolCallModel.run_id).where(
                or_(
                    func.lower(ToolCallModel.output).like(pattern, escape="\\"),
                    func.lower(cast(ToolCallModel.input, String)).like(pattern, escape="\\"),
                )
            )
            query = query.where(or_(RunModel.id.in_(hits), RunModel.id.in_(tools)))
        async with self._tx() as s:
            return [_run_row(m) for m in await s.scalars(query)]

    async def run_timeline(self, run_id: str) -> RunTimeline | None:
        async with self._tx() as s:
            run = await s.get(RunModel, run_id)
            if run is None:
                return None
            messages = await s.scalars(
                select(MessageModel).where(MessageModel.run_id == run_id).order_by(MessageModel.id)
            )
            calls = await s.scalars(
                select(ToolCallModel).where(ToolCallModel.run_id == run_id).order_by(ToolCallModel.id)
            )
            approvals = await s.scalars(
                select(ApprovalModel).where(ApprovalModel.run_id == run_id).order_by(ApprovalModel.created_at)
            )
            metrics = await s.get(RunMetricsModel, run_id)
            return RunTimeline(
                run=_run_row(run),
                messages=[
                    TranscriptRow(m.id, m.session_key, m.epoch, m.run_id, m.role, list(m.content), m.created_at)
                    for m in messages
                ],
                tool_calls=[_tool_call_row(m) for m in calls],
                approvals=[_approval_record(m) for m in approvals],
                first_token_s=metrics.first_token_s if metrics else None,
                cost_usd=metrics.cost_usd if metrics else None,
            )

    async def metrics_totals_between(self, since: datetime, until: datetime) -> MetricsTotals:
        """Sums over runs started in [since, until) (the usage chart's days)."""
        query = select(*_SUMS).where(RunMetricsModel.started_at >= since, RunMetricsModel.started_at < until)
        async with self._tx() as s:
            return _totals(tuple((await s.execute(query)).one()))

    async def metrics_in_buckets(self, bounds: list[datetime]) -> list[MetricsTotals]:
        """Sums per interval [bounds[i], bounds[i+1]) in one query (the usage chart's days)."""
        if len(bounds) < 2:
            return []
        started = RunMetricsModel.started_at
        bucket = case(*[(started < bound, i) for i, bound in enumerate(bounds[1:])], else_=-1).label("bucket")
        query = (
            select(bucket, *_SUMS)
            .where(started >= bounds[0], started < bounds[-1])
            .group_by(bucket)
        )
        found: dict[int, MetricsTotals] = {}
        async with self._tx() as s:
            for row in await s.execute(query):
                found[int(row[0])] = _totals(tuple(row[1:]))
        return [found.get(i, MetricsTotals()) for i in range(len(bounds) - 1)]

    async def metrics_by_model(self, since: datetime) -> dict[str, MetricsTotals]:
        """Sums per model over runs started at or after `since`, most tokens first."""
        query = (
            select(RunMetricsModel.model, *_SUMS)
            .where(RunMetricsModel.started_at >= since)
            .group_by(RunMetricsModel.model)
            .order_by(RunMetricsModel.model)
        )
        async with self._tx() as s:
            return {row[0]: _totals(tuple(row[1:])) for row in await s.execute(query)}

    async def count_runs(self, session_key: str | None = None) -> int:
        query = select(func.count()).select_from(RunModel)
        if session_key is not None:
            query = query.where(RunModel.session_key == session_key)
        async with self._tx() as s:
            return int((await s.execute(query)).scalar_one())


def _aware(value: Any) -> datetime | None:
    from datetime import UTC

    if value is None:
        return None
    if isinstance(value, str):  # an aggregate over the UTC column comes back raw on SQLite
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
