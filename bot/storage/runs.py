"""Runs (status, stop reason, token usage) and the tool calls made during them.

Every text written is passed through `agent_core.text.clean_text`/`clean_json` first, so what
is stored is valid for SQLite and PostgreSQL alike (PostgreSQL refuses NUL in text and JSON).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from agent_core.events import Usage
from agent_core.text import clean_json, clean_text
from bot.session_keys import origin_of
from bot.storage.base import RepositoryBase
from bot.storage.models import RunModel, ToolCallModel
from bot.storage.records import RunRow, SessionUsage, ToolCallRow
from bot.storage.sessions import insert_message, select_transcript


# Built once with bound parameters (see bot.storage.sessions): the run's own statements.
_RUNS = RunModel.__table__.c
_INSERT_RUN = insert(RunModel).values(
    id=bindparam("id"),
    session_key=bindparam("session_key"),
    model=bindparam("model"),
    status="running",
    turns=0,
    input_tokens=0,
    output_tokens=0,
    cache_read_tokens=0,
    cache_creation_tokens=0,
    started_at=bindparam("started_at", type_=_RUNS.started_at.type),
    account=bindparam("account"),
    requester=bindparam("requester"),
)
_FINISH_RUN = (
    update(RunModel)
    .where(RunModel.id == bindparam("run_id"))
    .values(
        status=bindparam("p_status"),
        stop_reason=bindparam("p_stop_reason"),
        turns=bindparam("p_turns"),
        input_tokens=bindparam("p_input"),
        output_tokens=bindparam("p_output"),
        cache_read_tokens=bindparam("p_cache_read"),
        cache_creation_tokens=bindparam("p_cache_creation"),
        finished_at=bindparam("p_finished_at", type_=_RUNS.finished_at.type),
    )
    .execution_options(synchronize_session=False)
)

_NOTE_USAGE = (
    update(RunModel)
    .where(RunModel.id == bindparam("run_id"), RunModel.status == "running")
    .values(
        turns=bindparam("p_turns"),
        input_tokens=bindparam("p_input"),
        output_tokens=bindparam("p_output"),
        cache_read_tokens=bindparam("p_cache_read"),
        cache_creation_tokens=bindparam("p_cache_creation"),
    )
    .execution_options(synchronize_session=False)
)


def _run_row(m: RunModel) -> RunRow:
    return RunRow(
        id=m.id,
        session_key=m.session_key,
        model=m.model,
        status=m.status,  # type: ignore[arg-type]  # only ever written from RunStatus
        stop_reason=m.stop_reason,
        turns=m.turns,
        usage=Usage(m.input_tokens, m.output_tokens, m.cache_read_tokens, m.cache_creation_tokens),
        started_at=m.started_at,
        finished_at=m.finished_at,
    )


def _tool_call_row(m: ToolCallModel) -> ToolCallRow:
    return ToolCallRow(
        call_id=m.call_id,
        run_id=m.run_id,
        name=m.name,
        input=dict(m.input),
        output=m.output,
        is_error=m.is_error,
        started_at=m.started_at,
        finished_at=m.finished_at,
        duration_s=m.duration_s,
    )


class RunRepository(RepositoryBase):
    async def start_run(
        self, run_id: str, session_key: str, model: str, *, account: str = "", requester: str = ""
    ) -> None:
        """Record a run as `running`. Must precede its tool calls (they reference it).
        `account`: the session whose budget it counts against (default its own; an isolated
        job's session counts against its chat); `requester`: who asked."""
        params = self._run_params(run_id, session_key, model, account, requester)
        await self._transact(lambda conn: conn.execute(_INSERT_RUN, params))

    async def begin_run(
        self, run_id: str, session_key: str, model: str, content: list[dict[str, Any]],
        *, account: str = "", requester: str = "",
    ) -> list[dict[str, Any]]:  # fmt: skip
        """`start_run`, `load_transcript` and `append_message(user content)` in one
        transaction: returns the transcript as it was before `content`, which is stored
        (committed) when this returns."""
        now = self._now()
        params = self._run_params(run_id, session_key, model, account, requester)

        def body(conn: Connection) -> list[dict[str, Any]]:
            conn.execute(_INSERT_RUN, params)
            history = select_transcript(conn, session_key)
            insert_message(conn, session_key, run_id, "user", content, now)
            return history

        return await self._transact(body)

    def _run_params(self, run_id: str, session_key: str, model: str, account: str, requester: str) -> dict[str, Any]:
        return {
            "id": run_id, "session_key": session_key, "model": clean_text(model), "started_at": self._now(),
            "account": origin_of(account or session_key), "requester": clean_text(requester) or None,
        }  # fmt: skip

    async def note_usage(self, run_id: str, turns: int, usage: Usage) -> None:
        """A running run's usage so far (between its turns), so every budget check — this
        run's, its workers', the chat's next message — counts what it has spent already."""
        params = {
            "run_id": run_id, "p_turns": turns, "p_input": usage.input_tokens, "p_output": usage.output_tokens,
            "p_cache_read": usage.cache_read_input_tokens, "p_cache_creation": usage.cache_creation_input_tokens,
        }  # fmt: skip
        await self._transact(lambda conn: conn.execute(_NOTE_USAGE, params))

    async def finish_run(
        self,
        run_id: str,
        status: str,
        stop_reason: str,
        turns: int,
        usage: Usage,
        *,
        session_key: str | None = None,
        last_message: list[dict[str, Any]] | None = None,
    ) -> None:
        """Close a run with its final status and token usage (last write wins). With
        `last_message`, the run's final assistant message is appended to `session_key`'s
        transcript in the same transaction."""
        if last_message and session_key is None:
            raise ValueError("finish_run: last_message needs its session_key")
        now = self._now()
        params = {
            "run_id": run_id,
            "p_status": status,
            "p_stop_reason": clean_text(stop_reason),
            "p_turns": turns,
            "p_input": usage.input_tokens,
            "p_output": usage.output_tokens,
            "p_cache_read": usage.cache_read_input_tokens,
            "p_cache_creation": usage.cache_creation_input_tokens,
            "p_finished_at": now,
        }

        def body(conn: Connection) -> None:
            if last_message and session_key is not None:
                insert_message(conn, session_key, run_id, "assistant", last_message, now)
            conn.execute(_FINISH_RUN, params)

        await self._transact(body)

    async def get_run(self, run_id: str) -> RunRow | None:
        async with self._tx() as s:
            row = await s.get(RunModel, run_id)
            return None if row is None else _run_row(row)

    async def usage_for_session(
        self, session_key: str, *, since: datetime | None = None
    ) -> SessionUsage:
        """Totals over the session's runs (all epochs; optionally only runs started at or
        after `since`). A session without runs gives zeros."""
        query = select(
            func.count(RunModel.id),
            func.coalesce(func.sum(RunModel.turns), 0),
            func.coalesce(func.sum(RunModel.input_tokens), 0),
            func.coalesce(func.sum(RunModel.output_tokens), 0),
            func.coalesce(func.sum(RunModel.cache_read_tokens), 0),
            func.coalesce(func.sum(RunModel.cache_creation_tokens), 0),
        ).where(RunModel.session_key == session_key)
        if since is not None:
            query = query.where(RunModel.started_at >= since)
        async with self._tx() as s:
            runs, turns, inp, out, cread, ccreate = (await s.execute(query)).one()
        # int(): PostgreSQL returns SUM(bigint) as Decimal.
        return SessionUsage(
            runs=int(runs),
            turns=int(turns),
            usage=Usage(int(inp), int(out), int(cread), int(ccreate)),
        )

    async def runs_left_running(self) -> list[RunRow]:
        """Runs still marked `running`; at start, before any run begins, these are runs a
        crash or kill interrupted."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(RunModel).where(RunModel.status == "running").order_by(RunModel.started_at)
            )
            return [_run_row(m) for m in rows]

    async def mark_interrupted_runs(self, session_key: str | None = None) -> list[RunRow]:
        """Atomically move every `running` run (of `session_key` only, when given) to
        `interrupted` (finished now) and return exactly those. Call once at start, before the
        first run — or, with replicas, for a session taken over from a dead replica; later
        it would also catch live runs."""
        where = [RunModel.status == "running"]
        if session_key is not None:
            where.append(RunModel.session_key == session_key)
        async with self._tx() as s:
            rows = await s.scalars(
                update(RunModel)
                .where(*where)
                .values(status="interrupted", stop_reason="interrupted", finished_at=self._now())
                .returning(RunModel)
                .execution_options(synchronize_session=False)
            )
            return sorted((_run_row(m) for m in rows), key=lambda r: r.started_at)

    # -- tool calls -------------------------------------------------------------------------

    async def record_tool_call(
        self, run_id: str, call_id: str, name: str, input: dict[str, Any]
    ) -> None:
        """Record a tool call as started; its run must already exist (start_run). The same
        call_id may be recorded again (models repeat ids); each call is its own row."""
        async with self._tx() as s:
            s.add(
                ToolCallModel(
                    call_id=clean_text(call_id),
                    run_id=run_id,
                    name=clean_text(name),
                    input=clean_json(input),
                    started_at=self._now(),
                )
            )

    async def finish_tool_call(
        self, call_id: str, output: str, is_error: bool, duration_s: float, *, run_id: str | None = None
    ) -> None:
        """Finish the newest unfinished call recorded with this call_id (in `run_id` when
        given: call ids are unique within a run, but another run may reuse one)."""
        newest = select(func.max(ToolCallModel.id)).where(
            ToolCallModel.call_id == clean_text(call_id), ToolCallModel.finished_at.is_(None)
        )
        if run_id is not None:
            newest = newest.where(ToolCallModel.run_id == run_id)
        async with self._tx() as s:
            await s.execute(
                update(ToolCallModel)
                .where(ToolCallModel.id == newest.scalar_subquery())
                .values(
                    output=clean_text(output),
                    is_error=is_error,
                    duration_s=duration_s,
                    finished_at=self._now(),
                )
                .execution_options(synchronize_session=False)
            )

    async def tool_calls_for_run(self, run_id: str) -> list[ToolCallRow]:
        """The run's tool calls in start order (unfinished ones have output None)."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(ToolCallModel)
                .where(ToolCallModel.run_id == run_id)
                .order_by(ToolCallModel.started_at, ToolCallModel.id)
            )
            return [_tool_call_row(m) for m in rows]
