"""The `schedule` tool's side in bot: jobs are created in, and confined to, the session the
tool call runs in, in the chat the run answers; and how a job is described (tool, /jobs, CLI)."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent_core.builtin_tools.schedule_tool import Action, InvalidJob, ScheduleInput
from agent_core.tools import ToolContext
from bot.scheduling import schedules
from bot.session_keys import origin_of
from bot.scheduling.scheduler import Scheduler, new_job_id, schedule_of
from bot.storage.jobs import JobRow, NewJob

MAX_JOBS_PER_SESSION = 50


class JobBook:
    """Implements `agent_core.builtin_tools.schedule_tool.JobBook`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.storage = scheduler.storage

    async def create(self, ctx: ToolContext, request: ScheduleInput) -> str:
        now = self.scheduler.clock()
        tz = self.scheduler.timezone
        try:
            if request.cron is not None:
                schedule = schedules.cron(request.cron, tz)
            elif request.every_minutes is not None:
                schedule = schedules.interval(request.every_minutes, tz)
            else:
                schedule = schedules.one_off(now, tz, at=request.at, delay_minutes=request.delay_minutes)
        except schedules.InvalidSchedule as exc:
            raise InvalidJob(str(exc)) from None
        chat = await self.storage.inbox_of_run(ctx.run_id) if ctx.run_id else None
        if chat is None:
            raise InvalidJob("this run has no chat to deliver to")
        session_key = origin_of(ctx.session_key)  # made inside an isolated run: its chat's job
        if request.isolated and session_key.startswith("group:") and chat.message.thread_id is not None:
            # A topic's own policy entry would not reach a session keyed below it: refuse
            # rather than run under the chat's (possibly wider) rules.
            raise InvalidJob("isolated jobs cannot be created in a topic thread; omit isolated")
        if len(await self.storage.list_jobs(session_key)) >= MAX_JOBS_PER_SESSION:
            raise InvalidJob(f"this chat already has {MAX_JOBS_PER_SESSION} jobs; cancel some first")
        first = schedule.next_after(now, anchor=now)
        if first is None:
            raise InvalidJob("this schedule never runs")
        prompt = (request.prompt or "").strip()
        message = chat.message
        job = await self.storage.create_job(
            NewJob(
                id=new_job_id(),
                name=(request.name or prompt[:60]).strip(),
                prompt=prompt,
                session_key=session_key,
                platform=message.platform,
                chat_kind=message.chat_kind,
                chat_id=message.chat_id,
                thread_id=message.thread_id,
                creator=ctx.requester or f"{message.platform}:{message.sender_id}",
                kind=schedule.kind,
                spec=schedule.spec,
                timezone=schedule.timezone,
                grace_s=int(schedule.grace(now).total_seconds()),
                next_run_at=first,
                created_at=now,
                isolated=request.isolated,
            )
        )
        self.scheduler.wake()
        alone = " (isolated: a fresh session each run)" if job.isolated else ""
        return (
            f"Scheduled job {job.id} “{job.name}”{alone}: {schedule.describe()}; "
            f"first run {self._at(first, job)}."
        )

    async def list(self, ctx: ToolContext) -> str:
        jobs = await self._jobs(ctx)
        if not jobs:
            return "No scheduled jobs in this chat."
        now = self.scheduler.clock()
        return "\n".join(describe(job, now) for job in jobs)

    async def change(self, ctx: ToolContext, action: Action, job_id: str) -> str:
        if job_id not in {j.id for j in await self._jobs(ctx)}:
            raise InvalidJob(f"no job {job_id!r} in this chat (see action=list)")
        op = "run" if action == "create" else action
        return await self.scheduler.operate(op, job_id)  # type: ignore[arg-type]

    async def _jobs(self, ctx: ToolContext) -> list[JobRow]:
        origin = origin_of(ctx.session_key)
        return await self.storage.list_jobs(None if origin == "main" else origin)

    def _at(self, at: datetime, job: JobRow) -> str:
        return local_time(at, job.timezone)


def local_time(at: datetime, tz: str) -> str:
    return f"{at.astimezone(schedules.zone(tz)):%Y-%m-%d %H:%M} ({tz})"


def misfire_policy(job: JobRow) -> str:
    grace = timedelta(seconds=job.grace_s)
    hours, rest = divmod(int(grace.total_seconds()), 3600)
    text = f"{hours} h" if hours and not rest else f"{int(grace.total_seconds()) // 60} min"
    return f"if missed: runs once when up to {text} late, otherwise skipped and you are asked"


def describe(job: JobRow, now: datetime) -> str:
    """One job in a few lines: schedule, next and last run, statuses, misfire policy."""
    schedule = schedule_of(job)
    alone = " · isolated" if job.isolated else ""
    lines = [f"{job.id} · “{job.name}” · {schedule.describe()}{alone} · {job.state}"]
    if job.state == "active" and job.next_run_at is not None:
        lines.append(f"next: {local_time(job.next_run_at, job.timezone)}")
    if job.state == "missed" and job.missed_at is not None:
        lines.append(f"missed: {local_time(job.missed_at, job.timezone)} — not run yet")
    if job.last_run_at is not None:
        lines.append(
            f"last: {local_time(job.last_run_at, job.timezone)} · execution {job.last_exec or '—'}"
            f" · delivery {job.last_delivery or '—'}"
        )
    elif job.last_exec == "missed" and job.missed_at is not None:
        lines.append(f"last: missed {local_time(job.missed_at, job.timezone)}")
    lines.append(misfire_policy(job))
    return "\n".join(lines)
