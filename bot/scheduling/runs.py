"""A fired job's run inside its session lane: the reply carries the job's name, a heartbeat
that says only `HEARTBEAT_OK` is never shown, and afterwards the run's execution status and
delivery status are recorded apart.

Delivery is judged from the run's delivery records (written only once the chat shows a
message), never from the run's success: an answer whose messages did not all reach their final
text is re-sent with backoff, and if it still fails the owner is told. Nothing is marked
"delivered" that the platform did not confirm.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from adapters.base import Adapter, ReplySink
from agent_core.events import ApprovalRequested, Event, RunFailed, RunFinished, RunStarted, TextDelta
from agent_core.inbound import ReplyTarget
from bot import heartbeat
from bot.scheduling.refs import JobRef
from bot.session_keys import isolated_key
from bot.storage import Storage

if TYPE_CHECKING:
    from bot.scheduling.scheduler import Scheduler

log = logging.getLogger(__name__)

RETRY_DELAYS_S: tuple[float, ...] = (10.0, 60.0, 300.0)
"""Waits before each re-send of an answer that did not arrive."""


class JobSink:
    """Wraps the platform's reply sink for one job run (see the module docstring)."""

    def __init__(
        self,
        open_sink: Callable[[], ReplySink],
        *,
        header: str,
        hold: bool,
        on_started: Callable[[str], Awaitable[None]],
    ) -> None:
        self._open = open_sink
        self._inner: ReplySink | None = None
        self._header = header
        self._headed = False
        self._held: list[Event] | None = [] if hold else None
        self._on_started = on_started
        self.suppressed = False

    async def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            await self._on_started(event.run_id)
        if self._header:
            if isinstance(event, TextDelta) and not self._headed:
                self._headed = True
                await self._emit(TextDelta(self._header))
            elif isinstance(event, RunFinished):
                event = replace(event, text=self._header + event.text)
        if self._held is not None:
            if isinstance(event, RunFinished) and heartbeat.is_silent(event.text):
                self.suppressed = True
                self._held = []
                return
            self._held.append(event)
            if isinstance(event, (ApprovalRequested, RunFinished, RunFailed)):
                held, self._held = self._held, None
                for e in held:
                    await self._emit(e)
            return
        await self._emit(event)

    async def _emit(self, event: Event) -> None:
        if self._inner is None:
            self._inner = self._open()
        await self._inner.handle(event)

    async def aclose(self, *, cancelled: bool = False) -> None:
        if self._inner is not None:
            await self._inner.aclose(cancelled=cancelled)


class JobRuns:
    """The hooks `Conversations` calls for a job's run; owns the delivery retries."""

    def __init__(
        self,
        storage: Storage,
        scheduler: Scheduler,
        *,
        retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.storage = storage
        self.scheduler = scheduler
        self.retry_delays_s = tuple(retry_delays_s)
        self.sleep = sleep
        self._retries: set[asyncio.Task[None]] = set()
        self._names: dict[str, str] = {}

    async def sink(self, ref: JobRef, open_sink: Callable[[], ReplySink]) -> JobSink:
        header = ""
        if not ref.heartbeat:
            job = await self.storage.get_job(ref.job_id)
            name = job.name if job else ref.job_id
            self._names[ref.job_id] = name
            header = f"⏰ {name}\n\n"
            if job is not None and job.isolated:
                # Called before the run reads its transcript: each run of an isolated job
                # starts from nothing (its lane never runs two of them at once).
                await self.storage.new_epoch(isolated_key(job.session_key, job.id))

        async def started(run_id: str) -> None:
            if not ref.heartbeat:
                await self.storage.job_started(ref.job_id, run_id)

        return JobSink(open_sink, header=header, hold=ref.heartbeat, on_started=started)

    async def finished(
        self,
        ref: JobRef,
        sink: JobSink,
        run_id: str,
        outcome: RunFinished | RunFailed | None,
        cancelled: bool,
        adapter: Adapter,
        target: ReplyTarget,
    ) -> None:
        if ref.heartbeat:
            log.info("heartbeat.finished", extra={"run": run_id, "suppressed": sink.suppressed})
            return
        if cancelled:
            execution = "stopped"
        elif isinstance(outcome, RunFinished):
            execution = "ok"
        else:
            execution = "failed"
        delivered = await self.storage.run_delivery(run_id)
        answer = outcome.text if isinstance(outcome, RunFinished) else ""
        if delivered == "delivered" or (delivered == "none" and not answer):
            shown = "delivered" if delivered == "delivered" else "nothing"  # a run that said nothing
            await self.storage.job_status(ref.job_id, execution=execution, delivery=shown)
            return
        await self.storage.job_status(ref.job_id, execution=execution, delivery="retrying")
        text = f"⏰ {self._names.get(ref.job_id, ref.job_id)}\n\n{answer or '(the run ended without an answer)'}"
        task = asyncio.create_task(self._redeliver(ref, adapter, target, text), name=f"job-redeliver:{ref.job_id}")
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def _redeliver(self, ref: JobRef, adapter: Adapter, target: ReplyTarget, text: str) -> None:
        reason = "the chat did not accept the message"
        for attempt, delay in enumerate(self.retry_delays_s, start=1):
            await self.sleep(delay)
            try:
                await adapter.send_text(ReplyTarget(target.platform, target.chat_id, target.thread_id), text)
            except Exception as exc:  # the platform's reason, for the owner's report
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("job.redeliver_failed", extra={"job": ref.job_id, "attempt": attempt})
                continue
            await self.storage.job_status(ref.job_id, delivery="delivered")
            return
        await self.storage.job_status(ref.job_id, delivery="failed")
        job = await self.storage.get_job(ref.job_id)
        if job is not None:
            await self.scheduler.tell_owner(
                job,
                f"⚠️ “{job.name}” ran but its answer could not be delivered to this job's chat "
                f"({job.platform} {job.chat_id}) after {len(self.retry_delays_s) + 1} attempts: {reason}",
            )

    async def drain(self) -> None:
        """Wait for pending re-sends (tests)."""
        while self._retries:
            await asyncio.gather(*list(self._retries), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._retries):
            task.cancel()
        for task in list(self._retries):
            with contextlib.suppress(asyncio.CancelledError):
                await task
