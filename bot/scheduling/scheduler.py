"""The scheduler: one per process. Finds due jobs, applies the misfire policy, and fires each
due time exactly once into the job's session lane (through `Conversations.run_job`).

Timing: APScheduler's triggers compute every next run (bot.scheduling.schedules); the rows
in our `jobs` table are the only state, so a restart rebuilds nothing and pickles nothing.
The loop waits on a wake event until the earliest next run (at most `MAX_NAP`), and takes its
time from an injected clock, so tests move time instead of sleeping.

Misfire policy (shown in /jobs): a run found late by at most its grace time runs once (older
due times of the same job are coalesced into that one run); a later one is skipped and the
owner is asked "missed 09:00 — run now?" with a button. A missed one-off waits for that
button; it is never dropped silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from adapters.base import Button
from agent_core.inbound import ReplyTarget
from bot import heartbeat
from bot.heartbeat import ActiveHours, HeartbeatSettings
from bot.leadership import Leadership
from bot.scheduling.refs import HEARTBEAT, JobRef
from bot.scheduling.schedules import Schedule, zone
from bot.scheduling.sends import new_send
from bot.session_keys import isolated_key
from bot.storage import Storage
from bot.storage.inbox import InboxMessage
from bot.storage.jobs import JobRow
from bot.storage.sends import SendRow

if TYPE_CHECKING:
    from adapters.base import Adapter
    from agent_core.inbound import Inbound
    from bot.scheduling.sends import PendingSends

log = logging.getLogger(__name__)

MAX_NAP = 60.0
"""Seconds the loop sleeps at most: a clock change (or a suspended laptop) is noticed soon."""
SHARED_NAP = 2.0
"""With replicas, jobs are created and changed on other replicas too (whose `wake` does not
reach this one): the leader looks at the table this often."""
Op = Literal["run", "pause", "resume", "cancel"]


def schedule_of(job: JobRow) -> Schedule:
    return Schedule(job.kind, job.spec, job.timezone)  # type: ignore[arg-type]


def new_job_id() -> str:
    return secrets.token_hex(4)


class HasSends(Protocol):
    @property
    def sends(self) -> PendingSends: ...


class JobLanes(Protocol):
    """What the scheduler fires into: `bot.conversations.Conversations` (named here, not
    imported: Conversations sits above the scheduler, see tests/test_architecture.py)."""

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def jobs(self) -> HasSends | None: ...

    async def run_job(self, inbound: Inbound, session_key: str, inbox_id: int, job: JobRef) -> str | None: ...


class Scheduler:
    def __init__(
        self,
        storage: Storage,
        *,
        timezone: str,
        owners: Sequence[str],
        workspace: Path,
        heartbeat_settings: HeartbeatSettings | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        leader: Leadership | None = None,
    ) -> None:
        self.storage = storage
        self.leader = leader or Leadership(storage.engine, "scheduler")
        """Only the replica holding it fires (bot.leadership); on SQLite, always this one."""
        self.leader.on_change = lambda held: self.wake()
        self.timezone = timezone
        self.owners = list(owners)
        self.workspace = workspace
        self.clock = clock
        self._beat = heartbeat_settings or HeartbeatSettings(every=0)
        self._hours = ActiveHours.parse(self._beat.active_hours) if self._beat.active_hours else None
        self._next_beat: datetime | None = None
        self._conversations: JobLanes | None = None
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tick_lock = asyncio.Lock()
        self.ticks = 0
        """Completed ticks (tests wait for a tick to pass instead of sleeping)."""
        self.ticked = asyncio.Condition()
        self.due_listed: Callable[[Sequence[JobRow]], Awaitable[None]] | None = None
        """Awaited between listing the due jobs and firing them: tests hold a tick there to
        race it (a Cancel committed meanwhile must win)."""

    # --- lifecycle -------------------------------------------------------------------
    def attach(self, conversations: JobLanes) -> None:
        self._conversations = conversations

    async def start(self) -> None:
        """Start the loop; it fires nothing until `adapters_ready` (the inbox backlog the last
        process left goes first, and answers need connected adapters)."""
        await self.leader.start()  # one attempt at once: a lone replica leads from the start
        if self.leader.held:
            await self._settle()
        self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def _settle(self) -> None:
        settled = await self.storage.settle_jobs()
        if settled:
            log.info("jobs.interrupted_by_restart", extra={"jobs": settled})

    def adapters_ready(self) -> None:
        if self._beat.every and self._next_beat is None:  # the first beat one period after start
            self._next_beat = self.clock() + timedelta(minutes=self._beat.every)
        self._ready.set()
        self._wake.set()

    def wake(self) -> None:
        """Look again now (a job was created or changed, or a test moved the clock)."""
        self._wake.set()

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.leader.aclose()

    async def _loop(self) -> None:
        settled_as_leader = self.leader.held  # settled by start
        await self._ready.wait()
        while True:
            self._wake.clear()
            nap = MAX_NAP
            if not self.leader.held:
                settled_as_leader = False  # a follower (another replica fires): wait to be woken
            else:
                try:
                    if not settled_as_leader:
                        # The jobs the last leader left running were cut off with it.
                        settled_as_leader = True
                        await self._settle()
                    await self.tick()
                except Exception:  # task boundary: one bad row must not stop every schedule
                    log.exception("scheduler.tick_failed")
                nap = await self._nap()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(nap):
                    await self._wake.wait()

    async def _nap(self) -> float:
        now = self.clock()
        longest = SHARED_NAP if self.leader.shared else MAX_NAP
        candidates = [d for d in (await self.storage.next_due_at(), self._next_beat) if d is not None]
        if not candidates:
            return longest
        return max(0.0, min(longest, (min(candidates) - now).total_seconds()))

    # --- firing ----------------------------------------------------------------------
    async def tick(self) -> int:
        """Handle every due job (and the heartbeat) as of the clock's now; returns how many
        runs were queued."""
        async with self._tick_lock:
            now = self.clock()
            fired = 0
            due = await self.storage.due_jobs(now)
            if self.due_listed is not None:
                await self.due_listed(due)
            for job in due:
                fired += await self._due(job, now)
            fired += await self._heartbeat(now)
        async with self.ticked:
            self.ticks += 1
            self.ticked.notify_all()
        return fired

    async def _due(self, job: JobRow, now: datetime) -> int:
        due = job.next_run_at
        assert due is not None
        schedule = schedule_of(job)
        following = schedule.next_after(now, anchor=job.created_at)
        if now - due <= timedelta(seconds=job.grace_s):
            return int(await self._fire(job, due, advance_to=following, advance=True))
        # The notice is stored (pending until delivered) in the transaction that gives the
        # due time up, and only if the job is still active and due then: a crash between the
        # two cannot lose it, and a Cancel or Pause since the listing sends none.
        notice = self.owner_notice(
            job,
            f"⏰ Missed “{job.name}” at {self._local(due, job)} (I was not running; later than its "
            f"grace of {_grace_text(job.grace_s)}). Run now?",
            [Button("▶ Run now", f"job:run:{job.id}")],
            key=f"missed:{job.id}:{int(due.timestamp())}",
        )
        if notice is None:
            log.warning("job.owner_unreachable", extra={"job": job.id})
        if not await self.storage.skip_job(job.id, due, following, notice=notice):
            return 0  # cancelled, paused or changed since it was listed
        log.info("job.missed", extra={"job": job.id, "due": due.isoformat()})
        jobs = self._conversations.jobs if self._conversations is not None else None
        if notice is not None and jobs is not None:
            jobs.sends.started(notice.key)
        return 0

    async def _fire(self, job: JobRow, due: datetime, *, advance_to: datetime | None, advance: bool) -> bool:
        ref = JobRef(job.id, due)
        text = f"[Scheduled job “{job.name}”, due {self._local(due, job)}] {job.prompt}"
        message = self._message(job.platform, job.chat_kind, job.chat_id, job.thread_id, job.creator,
                                f"⏰ {job.name}", text, ref)
        key = isolated_key(job.session_key, job.id) if job.isolated else job.session_key
        inbox_id = await self.storage.fire_job(job.id, due, message, key, advance_to=advance_to, advance=advance)
        if inbox_id is None:
            log.info("job.already_fired", extra={"job": job.id, "due": due.isoformat()})
            return False
        return await self._submit(message, key, inbox_id, ref)

    async def _submit(self, message: InboxMessage, session_key: str, inbox_id: int, ref: JobRef) -> bool:
        assert self._conversations is not None
        refused = await self._conversations.run_job(message.inbound(), session_key, inbox_id, ref)
        if refused is not None and not ref.heartbeat:
            await self.storage.job_status(ref.job_id, execution=refused)
        return refused is None

    async def _heartbeat(self, now: datetime) -> int:
        if self._next_beat is None or now < self._next_beat:
            return 0
        self._next_beat = now + timedelta(minutes=self._beat.every)
        if self._hours is not None and not self._hours.contains(now.astimezone(zone(self.timezone))):
            return 0
        text = await asyncio.to_thread(heartbeat.read_tasks, self.workspace)
        owner = self._owner_target()
        if text is None or owner is None:
            return 0
        ref = JobRef(HEARTBEAT, now.replace(microsecond=0))
        platform, chat_id = owner.platform, owner.chat_id
        message = self._message(platform, "private", chat_id, None, f"{platform}:{chat_id}", "💓 heartbeat",
                                heartbeat.prompt(text), ref)
        inbox_id = await self.storage.fire_job(HEARTBEAT, ref.due, message, "main", advance_to=None, advance=False)
        if inbox_id is None:
            return 0
        return int(await self._submit(message, "main", inbox_id, ref))

    def _message(
        self, platform: str, chat_kind: str, chat_id: str, thread_id: str | None, creator: str,
        name: str, text: str, ref: JobRef,
    ) -> InboxMessage:
        return InboxMessage(
            platform=platform, chat_kind=chat_kind, chat_id=chat_id, sender_id=creator.partition(":")[2],
            sender_name=name, text=text, received_at=self.clock(), thread_id=thread_id, update_id=ref.update_id,
        )

    # --- operations (tool, /jobs buttons, CLI) -----------------------------------------
    async def operate(self, op: Op, job_id: str) -> str:
        job = await self.storage.get_job(job_id)
        if job is None or job.state == "cancelled":
            return "That job no longer exists."
        now = self.clock()
        schedule = schedule_of(job)
        match op:
            case "run":
                if self._conversations is None:
                    return "I'm not running jobs right now."
                await self._fire(job, now.replace(microsecond=0), advance_to=None, advance=False)
                return f"▶ Running “{job.name}” now."
            case "pause":
                if job.state != "active":
                    return f"“{job.name}” is {job.state}; nothing to pause."
                await self.storage.set_job_state(job.id, "paused")
                return f"⏸ Paused “{job.name}”."
            case "resume":
                if job.state != "paused":
                    return f"“{job.name}” is {job.state}; nothing to resume."
                following = schedule.next_after(now, anchor=job.created_at)
                if following is None:
                    await self.storage.set_job_state(job.id, "missed")
                    return f"“{job.name}” was due while paused; use Run now to run it."
                await self.storage.set_job_state(job.id, "active", next_run_at=following)
                self.wake()
                return f"▶ Resumed “{job.name}”; next run {self._local(following, job)}."
            case "cancel":
                await self.storage.set_job_state(job.id, "cancelled")
                return f"✖ Cancelled “{job.name}”."
        return "Unknown action."

    # --- helpers ---------------------------------------------------------------------
    def _local(self, at: datetime, job: JobRow | None = None) -> str:
        tz = zone(job.timezone if job else self.timezone)
        local, now = at.astimezone(tz), self.clock().astimezone(tz)
        return f"{local:%H:%M}" if local.date() == now.date() else f"{local:%a %d %b %H:%M}"

    def _owner_target(self, platform: str | None = None) -> ReplyTarget | None:
        adapters = self._conversations.adapters if self._conversations else {}
        candidates = [o.partition(":") for o in self.owners]
        for p, _, user in sorted(candidates, key=lambda c: c[0] != platform):
            if p in adapters:
                return ReplyTarget(p, user)
        return None

    def owner_notice(
        self, job: JobRow, text: str, buttons: Sequence[Button] = (), *, key: str | None = None
    ) -> SendRow | None:
        """A notice to the owner about `job`, as a send kept pending until delivered
        (bot.scheduling.sends); `key` makes recording it twice store it once."""
        target = self._owner_target(job.platform)
        if target is None:
            return None
        return new_send(key or f"notice:{job.id}:{secrets.token_hex(6)}", "notice", target, text,
                        at=self.clock(), buttons=buttons, job_id=job.id)

    async def tell_owner(
        self, job: JobRow, text: str, buttons: Sequence[Button] = (), *, key: str | None = None
    ) -> None:
        notice = self.owner_notice(job, text, buttons, key=key)
        jobs = self._conversations.jobs if self._conversations is not None else None
        if notice is None or jobs is None:
            log.warning("job.owner_unreachable", extra={"job": job.id})
            return
        await jobs.sends.add(notice)


def _grace_text(seconds: int) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"

