"""Scheduled jobs (bot.scheduling): rows, and the one transaction that fires a job.

Exactly once per due time: `fire_job` marks the update `job:<id>:<due epoch>` seen, stores
the run's message in the inbox (already `queued` for the job's session) and advances the
job, all in one transaction. A second attempt at the same due time (a restart between the
fire and the run, a double tick) finds the update seen and stores nothing; from the inbox on,
a fired job is a message like any other (see bot.storage.inbox). The same transaction
claims the due time with one conditional UPDATE (still active, still due then), so a Cancel
or Pause that commits after the scheduler read the row is obeyed, never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import exists, func, select, update

from bot.storage.base import RepositoryBase, rowcount
from bot.storage.inbox import InboxMessage, InboxRow, _row
from bot.storage.models import DeliveryModel, InboxModel, JobModel, PendingSendModel, SeenUpdateModel
from bot.storage.sends import SendRepository, SendRow

JobState = Literal["active", "paused", "done", "missed", "cancelled"]


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    name: str
    prompt: str
    session_key: str
    platform: str
    chat_kind: str
    chat_id: str
    thread_id: str | None
    creator: str
    kind: str
    spec: str
    timezone: str
    grace_s: int
    next_run_at: datetime | None
    created_at: datetime
    """The scheduler's clock at creation: an interval job's anchor."""
    isolated: bool = False
    """Runs in a session of its own (bot.session_keys.isolated_key): no chat history."""


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    name: str
    prompt: str
    session_key: str
    platform: str
    chat_kind: str
    chat_id: str
    thread_id: str | None
    creator: str
    kind: str
    spec: str
    timezone: str
    grace_s: int
    state: JobState
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_run_id: str | None
    last_exec: str | None
    last_delivery: str | None
    missed_at: datetime | None
    created_at: datetime
    isolated: bool = False


def _job(m: JobModel) -> JobRow:
    return JobRow(
        m.id, m.name, m.prompt, m.session_key, m.platform, m.chat_kind, m.chat_id, m.thread_id, m.creator,
        m.kind, m.spec, m.timezone, m.grace_s, m.state, m.next_run_at, m.last_run_at,  # type: ignore[arg-type]
        m.last_run_id, m.last_exec, m.last_delivery, m.missed_at, m.created_at, bool(m.isolated),
    )


class JobRepository(RepositoryBase):
    async def create_job(self, job: NewJob) -> JobRow:
        now = self._now()
        async with self._tx() as s:
            row = JobModel(
                id=job.id, name=job.name[:255], prompt=job.prompt, session_key=job.session_key,
                platform=job.platform, chat_kind=job.chat_kind, chat_id=job.chat_id, thread_id=job.thread_id,
                creator=job.creator, kind=job.kind, spec=job.spec, timezone=job.timezone, grace_s=job.grace_s,
                state="active", next_run_at=job.next_run_at, created_at=job.created_at, updated_at=now,
                isolated=job.isolated,
            )
            s.add(row)
            await s.flush()
            return _job(row)

    async def get_job(self, job_id: str) -> JobRow | None:
        async with self._tx() as s:
            row = await s.get(JobModel, job_id)
            return None if row is None else _job(row)

    async def list_jobs(self, session_key: str | None = None, *, include_ended: bool = False) -> list[JobRow]:
        """A session's jobs (all sessions when None), oldest first; cancelled and finished
        one-offs only with `include_ended`."""
        async with self._tx() as s:
            query = select(JobModel).order_by(JobModel.created_at, JobModel.id)
            if session_key is not None:
                query = query.where(JobModel.session_key == session_key)
            if not include_ended:
                query = query.where(JobModel.state.in_(["active", "paused", "missed"]))
            return [_job(m) for m in await s.scalars(query)]

    async def due_jobs(self, now: datetime) -> list[JobRow]:
        async with self._tx() as s:
            rows = await s.scalars(
                select(JobModel)
                .where(JobModel.state == "active", JobModel.next_run_at <= now)
                .order_by(JobModel.next_run_at)
            )
            return [_job(m) for m in rows]

    async def next_due_at(self) -> datetime | None:
        async with self._tx() as s:
            return await s.scalar(select(func.min(JobModel.next_run_at)).where(JobModel.state == "active"))

    async def fire_job(
        self,
        job_id: str,
        due: datetime,
        message: InboxMessage,
        session_key: str,
        *,
        advance_to: datetime | None,
        advance: bool,
    ) -> int | None:
        """Store the run of `job_id` due at `due` (see the module docstring). With `advance`
        (the scheduler's own due time) it fires only if the job is still active and still due
        at `due` — a Cancel or Pause committed after the scheduler listed it wins — and its
        next run becomes `advance_to` (None: a finished one-off). Without (Run now, the
        heartbeat) a cancelled job never fires. Returns the inbox row id, or None when nothing
        was fired (fired before, or no longer due)."""
        now = self._now()
        async with self._tx() as s:
            if advance:
                # One conditional UPDATE claims the due time: whatever changed the row since
                # the scheduler read it (cancel, pause, another tick) makes it match nothing.
                values: dict[str, object] = {"next_run_at": advance_to, "updated_at": now}
                if advance_to is None:
                    values["state"] = "done"
                claimed = await s.execute(
                    update(JobModel)
                    .where(JobModel.id == job_id, JobModel.state == "active", JobModel.next_run_at == due)
                    .values(**values)
                    .execution_options(synchronize_session=False)
                )
                if rowcount(claimed) != 1:
                    return None
            else:
                cancelled = await s.scalar(
                    select(JobModel.id).where(JobModel.id == job_id, JobModel.state == "cancelled")
                )
                if cancelled is not None:
                    return None
            seen = await s.execute(
                self._insert(SeenUpdateModel)
                .values(platform=message.platform, update_id=message.update_id, seen_at=now)
                .on_conflict_do_nothing(index_elements=["platform", "update_id"])
            )
            if rowcount(seen) != 1:
                return None  # fired before (a restart, a double tick): the advance above stands
            ran: dict[str, object] = {
                "last_run_at": due, "last_exec": "queued", "last_delivery": None, "missed_at": None, "updated_at": now,
            }
            job = await s.get(JobModel, job_id)
            if not advance and job is not None and job.kind == "once" and job.state == "missed":
                ran["state"] = "done"  # "run now" on a missed one-off: it has run now
            await s.execute(
                update(JobModel).where(JobModel.id == job_id).values(**ran).execution_options(synchronize_session=False)
            )
            row = InboxModel(
                platform=message.platform, chat_kind=message.chat_kind, chat_id=message.chat_id,
                thread_id=message.thread_id, sender_id=message.sender_id, sender_name=message.sender_name[:255],
                text=message.text, mentioned=False, message_id=None, update_id=message.update_id,
                session_key=session_key, state="queued", received_at=now, updated_at=now,
            )
            s.add(row)
            await s.flush()
            return row.id

    async def skip_job(
        self, job_id: str, missed_at: datetime, next_run_at: datetime | None, *, notice: SendRow | None = None
    ) -> bool:
        """A due time missed beyond its grace: not run; the owner is asked (`notice`, stored
        in the same transaction, so it is never lost between the two). A one-off waits in
        `missed` for the owner's "run now" (never dropped silently). Like `fire_job`, only
        while the job is still active and due at `missed_at`; False when it no longer is."""
        values: dict[str, object] = {
            "missed_at": missed_at, "last_exec": "missed", "next_run_at": next_run_at, "updated_at": self._now(),
        }
        if next_run_at is None:
            values["state"] = "missed"
        async with self._tx() as s:
            result = await s.execute(
                update(JobModel)
                .where(JobModel.id == job_id, JobModel.state == "active", JobModel.next_run_at == missed_at)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if rowcount(result) != 1:
                return False
            if notice is not None:
                await s.execute(SendRepository._insert_send(self, notice))  # type: ignore[arg-type]
            return True

    async def set_job_state(self, job_id: str, state: JobState, *, next_run_at: datetime | None = None) -> None:
        values: dict[str, object] = {"state": state, "updated_at": self._now()}
        if state == "active":
            values["next_run_at"] = next_run_at
        await self._update(job_id, values)

    async def job_started(self, job_id: str, run_id: str) -> None:
        await self._update(job_id, {"last_exec": "running", "last_run_id": run_id, "updated_at": self._now()})

    async def job_status(self, job_id: str, *, execution: str | None = None, delivery: str | None = None) -> None:
        values: dict[str, object] = {"updated_at": self._now()}
        if execution is not None:
            values["last_exec"] = execution
        if delivery is not None:
            values["last_delivery"] = delivery
        await self._update(job_id, values)

    async def settle_jobs(self) -> int:
        """At start-up: a run the last process left `running` was cut off (its reply is
        marked in place by the delivery recovery). Re-sends it left pending resume
        (bot.scheduling.sends); a `retrying` job without one never gets through."""
        async with self._tx() as s:
            result = await s.execute(
                update(JobModel)
                .where(JobModel.last_exec == "running")
                .values(last_exec="interrupted", updated_at=self._now())
                .execution_options(synchronize_session=False)
            )
            await s.execute(
                update(JobModel)
                .where(
                    JobModel.last_delivery == "retrying",
                    ~exists().where(PendingSendModel.job_id == JobModel.id, PendingSendModel.state == "pending"),
                )
                .values(last_delivery="failed", updated_at=self._now())
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)

    async def run_delivery(self, run_id: str) -> Literal["delivered", "failed", "none"]:
        """Whether every message of the run's answer reached its final text."""
        async with self._tx() as s:
            states = list(await s.scalars(select(DeliveryModel.state).where(DeliveryModel.run_id == run_id)))
        if not states:
            return "none"
        return "delivered" if all(state == "final" for state in states) else "failed"

    async def inbox_of_run(self, run_id: str) -> InboxRow | None:
        """The message a run answers (the chat a tool call came from)."""
        async with self._tx() as s:
            row = await s.scalar(select(InboxModel).where(InboxModel.run_id == run_id).order_by(InboxModel.id.desc()))
            return None if row is None else _row(row)

    async def _update(self, job_id: str, values: dict[str, object]) -> None:
        async with self._tx() as s:
            await s.execute(update(JobModel).where(JobModel.id == job_id).values(**values))
