"""A fired job's run inside its session lane: the reply carries the job's name, a heartbeat
that says only `HEARTBEAT_OK` is never shown, and afterwards the run's execution status and
delivery status are recorded apart.

Delivery is judged from what the reply's messages show (the renderer's result; the delivery
records, written only once the chat shows a message, for a sink that cannot say), never from
the run's success. What did not reach the chat is re-sent with backoff — only that: parts that
arrived are not repeated — as a send that survives a restart (bot.scheduling.sends); if it
still fails the owner is told, once. A part whose send lost its answer and could not be found
may show in the chat: that part is never re-sent, and the owner is told that it may be missing.
Nothing is marked "delivered" that the platform did not confirm.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from adapters.base import Adapter, ReplySink
from adapters.stream import DeliveredPart
from agent_core.events import ApprovalRequested, Event, RunFailed, RunFinished, RunStarted, TextDelta
from agent_core.inbound import ReplyTarget
from bot import heartbeat
from bot.scheduling.refs import JobRef
from bot.scheduling.sends import RETRY_DELAYS_S, PendingSends, Settled, new_send
from bot.session_keys import isolated_key
from bot.storage import Storage
from bot.storage.jobs import JobRow
from bot.storage.sends import SendRow

if TYPE_CHECKING:
    from bot.scheduling.scheduler import Scheduler

log = logging.getLogger(__name__)



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

    def parts(self) -> tuple[DeliveredPart, ...] | None:
        """After `aclose`: what each message of the answer shows; None if the platform's
        sink cannot say (or nothing was opened)."""
        result = getattr(self._inner, "result", None)
        return None if result is None else result().parts


class JobRuns:
    """The hooks `Conversations` calls for a job's run; owns the delivery retries."""

    def __init__(
        self,
        storage: Storage,
        scheduler: Scheduler,
        *,
        adapters: Callable[[], Mapping[str, Adapter]] = dict,
        retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.storage = storage
        self.scheduler = scheduler
        self._names: dict[str, str] = {}
        self.sends = PendingSends(
            storage, adapters, clock=lambda: scheduler.clock(), follow_up=self._report, on_settled=self._settled,
            retry_delays_s=retry_delays_s, sleep=sleep,
        )

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
        answer = outcome.text if isinstance(outcome, RunFinished) else ""
        name = self._names.get(ref.job_id, ref.job_id)
        verdict, rest = await self._undelivered(sink, run_id, answer)
        if verdict in ("delivered", "nothing"):
            await self.storage.job_status(ref.job_id, execution=execution, delivery=verdict)
            return
        key = f"answer:{run_id}"
        if verdict == "unknown":  # a part may show: sending it again could show it twice
            await self.storage.job_status(ref.job_id, execution=execution, delivery="unknown")
            job = await self.storage.get_job(ref.job_id)
            report = None if job is None else self._unknown_report(job, key)
            if report is not None:
                await self.sends.add(report)
            if not rest:
                return
            key = f"{PARTLY_UNKNOWN}{run_id}"  # the parts known to be missing still go
        else:
            await self.storage.job_status(ref.job_id, execution=execution, delivery="retrying")
        if rest is None:
            text = f"⏰ {name}\n\n{answer or '(the run ended without an answer)'}"
        else:  # what arrived (or may have) is not repeated
            text = f"⏰ {name} (continued)\n\n" + "\n\n".join(rest)
        where = ReplyTarget(target.platform, target.chat_id, target.thread_id)
        await self.sends.add(
            new_send(key, "answer", where, text, at=self.scheduler.clock(), after_s=self.sends.retry_delays_s[0],
                     job_id=ref.job_id)
        )

    async def _undelivered(self, sink: JobSink, run_id: str, answer: str) -> tuple[Verdict, list[str] | None]:
        parts = sink.parts()
        if parts is not None:
            return judge(parts)
        delivered = await self.storage.run_delivery(run_id)  # a sink that cannot say: the records
        if delivered == "delivered" or (delivered == "none" and not answer):
            return ("delivered" if delivered == "delivered" else "nothing"), None
        return "resend", None

    async def _report(self, settled: Settled) -> SendRow | None:
        """The owner's report of an answer that ended undelivered (stored with its end)."""
        send = settled.send
        if send.kind != "answer" or send.job_id is None:
            log.error("send.notice_undelivered", extra={"send": send.key, "state": settled.state})
            return None
        job = await self.storage.get_job(send.job_id)
        if job is None:
            return None
        if settled.state == "unknown":
            return self._unknown_report(job, send.key, settled.reason)
        return self.scheduler.owner_notice(
            job,
            f"⚠️ “{job.name}” ran but its answer could not be delivered to this job's chat "
            f"({job.platform} {job.chat_id}) after {len(self.sends.retry_delays_s) + 1} attempts: {settled.reason}",
            key=f"report:{send.key}",
        )

    def _unknown_report(self, job: JobRow, key: str, reason: str = "") -> SendRow | None:
        detail = f" ({reason})" if reason else ""
        return self.scheduler.owner_notice(
            job,
            f"⚠️ “{job.name}” ran, but I cannot tell whether its answer reached this job's chat "
            f"({job.platform} {job.chat_id}): the connection was lost while it was being sent{detail}. "
            "I did not send it again, so it shows there at most once.",
            key=f"report:{key}",
        )

    async def _settled(self, settled: Settled) -> None:
        send = settled.send
        if send.kind == "answer" and send.job_id is not None:
            state = "delivered" if settled.state == "sent" else settled.state
            if send.key.startswith(PARTLY_UNKNOWN) and state == "delivered":
                state = "unknown"  # the rest arrived; whether the lost part did is still unknown
            await self.storage.job_status(send.job_id, delivery=state)

    async def resume(self) -> int:
        """At start-up, once adapters are connected: sends the last process left pending
        (they stay stored if this fails: the next start tries again)."""
        try:
            return await self.sends.resume()
        except Exception:  # start-up goes on: due jobs must still fire
            log.exception("sends.resume_failed")
            return 0

    async def drain(self) -> None:
        """Wait for pending sends (tests)."""
        await self.sends.drain()

    async def aclose(self) -> None:
        await self.sends.aclose()


Verdict = Literal["delivered", "nothing", "unknown", "resend"]


PARTLY_UNKNOWN = "rest:"
"""Key prefix of a re-send of the parts known missing from an answer with a lost part."""


def judge(parts: Sequence[DeliveredPart]) -> tuple[Verdict, list[str] | None]:
    """How a live reply ended, and what of it is still to send (None: all of it). A part
    that may show under an unknown id makes it `unknown`: that part is never sent again
    (the rest, the parts known to be missing, is returned to send)."""
    missing = [text for p in parts if p.state in ("failed", "live") and not p.lost and (text := _unshown(p))]
    if any(p.lost for p in parts):
        return "unknown", missing
    shown = any(p.message_id is not None for p in parts)
    if not missing:
        return ("delivered" if shown else "nothing"), None
    return "resend", missing if shown else None


def _unshown(part: DeliveredPart) -> str:
    """What of a message's final text its chat does not show: a message left part-way
    (its edits failed) shows a prefix of it already."""
    if part.message_id is not None and part.text and part.final_text.startswith(part.text):
        rest = part.final_text[len(part.text):].strip()
        return "…" + rest if rest else ""
    return part.final_text
