"""Structured execution rows: plans, goal locks, ask_user questions, worker runs. Implements
`agent_core.plans.PlanStore`, `agent_core.questions.QuestionStore` and
`agent_core.workers.WorkerStore`."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import bindparam, delete, select, update

from agent_core.plans import GoalLock, Plan, Step
from agent_core.questions import Question, QuestionState
from agent_core.text import clean_json, clean_text
from agent_core.workers import WorkerRecord, WorkerStatus
from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import GoalLockModel, PlanModel, QuestionModel, WorkerRunModel


# A session's reads at its first run, built once with bound parameters.
_KEY = bindparam("session_key")
_LATEST_PLAN = (
    select(*PlanModel.__table__.columns)
    .where(PlanModel.session_key == _KEY)
    .order_by(PlanModel.updated_at.desc(), PlanModel.created_at.desc())
    .limit(1)
)
_ACTIVE_PLAN = _LATEST_PLAN.where(PlanModel.state == "active")
_GOAL_LOCK = select(*GoalLockModel.__table__.columns).where(GoalLockModel.session_key == _KEY)
_PENDING_QUESTION = (
    select(*QuestionModel.__table__.columns)
    .where(QuestionModel.session_key == _KEY, QuestionModel.state == "pending")
    .order_by(QuestionModel.created_at.desc())
    .limit(1)
)


class PlanRepository(RepositoryBase):
    # -- plans -----------------------------------------------------------------------------

    async def save_plan(self, plan: Plan) -> None:
        steps: list[Any] = clean_json([dataclasses.asdict(s) for s in plan.steps])
        values = dict(
            session_key=plan.session_key, run_id=plan.run_id, steps=steps, current=plan.current,
            state=plan.state, corrections=plan.corrections, outcome=clean_text(plan.outcome),
            created_at=plan.created_at, updated_at=plan.updated_at,
        )  # fmt: skip
        async with self._tx() as s:
            stmt = self._insert(PlanModel).values(id=plan.id, **values)
            await s.execute(stmt.on_conflict_do_update(index_elements=["id"], set_=values))

    async def active_plan(self, session_key: str) -> Plan | None:
        return await self._plan(session_key, active=True)

    async def latest_plan(self, session_key: str) -> Plan | None:
        return await self._plan(session_key, active=False)

    async def _plan(self, session_key: str, *, active: bool) -> Plan | None:
        query = _ACTIVE_PLAN if active else _LATEST_PLAN
        row = await self._transact(lambda conn: conn.execute(query, {"session_key": session_key}).first())
        if row is None:
            return None
        return Plan(
            row.id, row.session_key, row.run_id, tuple(Step(**step) for step in row.steps), row.current,
            row.state, row.corrections, row.outcome, row.created_at, row.updated_at,  # type: ignore[arg-type]
        )  # fmt: skip

    # -- goal locks ------------------------------------------------------------------------

    async def goal_lock(self, session_key: str) -> GoalLock | None:
        row = await self._transact(lambda conn: conn.execute(_GOAL_LOCK, {"session_key": session_key}).first())
        if row is None:
            return None
        return GoalLock(row.session_key, row.goal, tuple(row.constraints), row.reason)

    async def set_goal_lock(self, lock: GoalLock) -> None:
        values = dict(goal=clean_text(lock.goal), constraints=[clean_text(c) for c in lock.constraints],
                      reason=clean_text(lock.reason), updated_at=self._now())  # fmt: skip
        async with self._tx() as s:
            stmt = self._insert(GoalLockModel).values(session_key=lock.session_key, **values)
            await s.execute(stmt.on_conflict_do_update(index_elements=["session_key"], set_=values))

    async def clear_goal_lock(self, session_key: str) -> bool:
        async with self._tx() as s:
            result = await s.execute(delete(GoalLockModel).where(GoalLockModel.session_key == session_key))
            return rowcount(result) == 1

    # -- questions -------------------------------------------------------------------------

    async def add_question(self, question: Question) -> None:
        async with self._tx() as s:
            s.add(QuestionModel(
                id=question.id, session_key=question.session_key, run_id=question.run_id,
                call_id=question.call_id, addressee=question.addressee, text=clean_text(question.text),
                options=[clean_text(o) for o in question.options], state=question.state,
                created_at=self._now(),
            ))  # fmt: skip

    async def get_question(self, question_id: str) -> Question | None:
        async with self._tx() as s:
            row = await s.get(QuestionModel, question_id)
        return None if row is None else _question(row)

    async def pending_question(self, session_key: str) -> Question | None:
        row = await self._transact(lambda conn: conn.execute(_PENDING_QUESTION, {"session_key": session_key}).first())
        return None if row is None else _question(row)

    async def close_question(
        self, question_id: str, state: QuestionState, answer: str | None, by: str | None
    ) -> bool:
        async with self._tx() as s:
            result = await s.execute(
                update(QuestionModel)
                .where(QuestionModel.id == question_id, QuestionModel.state == "pending")
                .values(state=state, answer=clean_text(answer) if answer is not None else None,
                        answered_by=by, answered_at=self._now())  # fmt: skip
            )
            return rowcount(result) == 1

    # -- worker runs -----------------------------------------------------------------------

    async def add_worker(self, record: WorkerRecord) -> None:
        async with self._tx() as s:
            s.add(WorkerRunModel(
                id=record.id, parent_run_id=record.parent_run_id, session_key=record.session_key,
                name=clean_text(record.name), task=clean_text(record.task), status=record.status,
                started_at=record.started_at,
            ))  # fmt: skip

    async def finish_worker(self, worker_id: str, status: WorkerStatus, result: str) -> None:
        async with self._tx() as s:
            await s.execute(
                update(WorkerRunModel)
                .where(WorkerRunModel.id == worker_id, WorkerRunModel.status == "running")
                .values(status=status, result=clean_text(result), finished_at=self._now())
            )

    async def worker_runs(self, parent_run_id: str | None = None) -> list[WorkerRecord]:
        query = select(WorkerRunModel).order_by(WorkerRunModel.started_at)
        if parent_run_id is not None:
            query = query.where(WorkerRunModel.parent_run_id == parent_run_id)
        async with self._tx() as s:
            rows = (await s.scalars(query)).all()
        return [_worker(r) for r in rows]

    async def interrupt_workers(self) -> list[WorkerRecord]:
        """At start: workers the previous process left running are `interrupted` (never
        silently lost); returns them."""
        async with self._tx() as s:
            rows = await s.scalars(
                update(WorkerRunModel)
                .where(WorkerRunModel.status == "running")
                .values(status="interrupted", result="Interrupted by a restart before it finished.",
                        finished_at=self._now())  # fmt: skip
                .returning(WorkerRunModel)
                .execution_options(synchronize_session=False)
            )
            return [_worker(r) for r in rows]


def _question(row: Any) -> Question:
    return Question(
        row.id, row.session_key, row.run_id, row.addressee, row.text, tuple(row.options), row.call_id,
        row.state, row.answer, row.answered_by, row.created_at,  # type: ignore[arg-type]
    )  # fmt: skip


def _worker(row: WorkerRunModel) -> WorkerRecord:
    return WorkerRecord(
        row.id, row.parent_run_id, row.session_key, row.name, row.task, row.status,  # type: ignore[arg-type]
        row.result, row.started_at, row.finished_at,
    )  # fmt: skip
