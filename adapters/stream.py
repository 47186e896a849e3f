"""Streams one run's reply into a chat by editing messages in place (DESIGN.md, Streaming).

Contract of `StreamRenderer` (one per run):
- typing indicator every `typing_every_s` until the first message exists;
- the first message once `first_send_chars` characters exist, or `first_send_after_s`
  after the first content (text or a tool starting), or when a model turn with text ends
  (its text is complete: no reason to wait for the run's bookkeeping);
- then the same message grows by edits, paced per chat by the shared `Outbox`; each request
  carries the newest text (intermediate texts are skipped), one request in flight, and an
  edit is only made when the content differs from what was delivered (no "not modified");
- past the chunk target the message is closed at the best break (its final payload never
  changes again) and the text continues in a new message; messages are sent in order;
- tool status lines sit at the end of the open message while the run goes on and are
  removed from the final text; the final text is exactly `plan_chunks(answer)`, plus a
  notice on failure or cancellation, or `empty_text` when there was no answer at all;
- `RateLimited` pauses the outbox and the same message is retried with the newest text;
  `FormattingRejected` resends the chunk as plain text; a message deleted by the user
  (`MessageGone`) is left alone;
- a send whose answer was lost (`DeliveryUnknown`) is never sent again as is: at the
  part's next turn the transport (`LostSendProbe`) looks for the message; found, it is
  adopted and edited on; provably absent, the part is sent afresh; if the transport cannot
  tell, the part is given up (a possibly missing part beats a duplicate);
- `on_delivery(part_index, message_id, text, final)` runs after every delivered request.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from agent_core.events import Event, RunFailed, RunFinished, TextDelta, TurnEnded

from adapters.errors import DeliveryError, DeliveryUnknown, MessageGone, RateLimited
from adapters.outbox import Clock, Outbox, Pace, Priority, Sleep
from adapters.render.chunks import ChunkSpec
from adapters.render.entities import Payload
from adapters.render.layout import Part, PartState, ReplyLayout
from adapters.transport import ChatTransport, LostSendProbe, edit_payload, send_payload

log = logging.getLogger(__name__)

OnDelivery = Callable[[int, str, str, bool], Awaitable[None] | None]
_ids = itertools.count()


@dataclass(frozen=True, slots=True)
class DeliveredPart:
    index: int
    message_id: str | None
    text: str
    """The text last delivered to this message ("" if none)."""
    state: PartState
    final_text: str = ""
    """What this message was to show in the end."""
    lost: bool = False
    """Its send lost its answer and whether it was posted could not be found out: it may
    show in the chat (under an unknown id); sending it again could show it twice."""


@dataclass(frozen=True, slots=True)
class RenderResult:
    parts: tuple[DeliveredPart, ...]

    @property
    def ok(self) -> bool:
        return all(p.state == "done" for p in self.parts)

    @property
    def message_ids(self) -> list[str]:
        return [p.message_id for p in self.parts if p.message_id is not None]


class StreamRenderer:
    """Renders one run's events into one chat; see the module docstring for the contract.

    Use `await renderer.run(events)`, or `async with renderer:` + `feed(event)` per event,
    or `handle(event)` ... `aclose(cancelled=...)` (it satisfies `adapters.base.ReplySink`).
    Closing always leaves the chat final: the reply is finalized and delivered first."""

    def __init__(
        self,
        transport: ChatTransport,
        outbox: Outbox,
        *,
        on_delivery: OnDelivery | None = None,
        spec: ChunkSpec | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        first_send_chars: int = 30,
        first_send_after_s: float = 1.0,
        typing_every_s: float = 5.0,
        empty_text: str = "(no answer)",
        max_status_lines: int = 5,
        max_attempts: int = 3,
    ) -> None:
        self._t = transport
        self._outbox = outbox
        self._on_delivery = on_delivery
        spec = spec or ChunkSpec.create(transport.limit_units, transport.unit, transport.renders_markdown)
        self._layout = ReplyLayout(spec, empty_text=empty_text, max_status_lines=max_status_lines)
        self._clock, self._sleep = clock, sleep
        self._first_chars, self._first_after = first_send_chars, first_send_after_s
        self._typing_every, self._max_attempts = typing_every_s, max_attempts
        self._uid = next(_ids)
        self._pace = Pace(
            transport.min_edit_interval_s,
            getattr(transport, "burst", 1),
            getattr(transport, "per_minute", None),
        )
        self._gate_open = False  # may the first message be sent?
        self._first_content_at: float | None = None
        self._started = False
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._typing_task: asyncio.Task[None] | None = None
        self._progress = asyncio.Event()

    @property
    def _parts(self) -> list[Part]:
        return self._layout.parts

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the typing indicator (done by `feed` if not called before)."""
        if self._closed:
            raise RuntimeError("renderer is closed")
        if not self._started:
            self._started = True
            self._typing_task = self._spawn(self._typing_loop())

    async def __aenter__(self) -> StreamRenderer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None or issubclass(et, asyncio.CancelledError):
            await self.aclose(cancelled=et is not None)
        else:
            await self._close("⚠️ reply interrupted")

    async def run(self, events: AsyncIterable[Event]) -> RenderResult:
        """Render every event, then wait until the final text is delivered."""
        async with self:
            async for event in events:
                await self.feed(event)
            return await self.finish()

    async def finish(self) -> RenderResult:
        """Finalize (if no RunFinished/RunFailed came) and wait until every message shows
        its final text or failed for good."""
        if not self._layout.finished:
            self._finalize(None)
        while not self._closed and any(p.state == "live" for p in self._parts):
            self._progress.clear()
            await self._progress.wait()
        return self.result()

    async def aclose(self, *, cancelled: bool = False) -> None:
        """Leave the chat final, then release everything (idempotent). Unfinished replies
        are finalized ("⏹ stopped" if `cancelled`) and delivered; if this wait is itself
        cancelled, queued requests are dropped and the cancellation propagates."""
        await self._close("⏹ stopped" if cancelled else None)

    async def _close(self, notice: str | None) -> None:
        if self._closed:
            return
        try:
            if not self._layout.finished:
                self._finalize(notice)
            await self.finish()
        finally:
            self._closed = True
            for part in self._parts:
                self._outbox.discard(self._key(part))
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._progress.set()

    def result(self) -> RenderResult:
        return RenderResult(
            tuple(
                DeliveredPart(
                    p.index, p.message_id, p.delivered.text if p.delivered else "", p.state,
                    p.final.text if p.final else "", p.lost is not None and p.message_id is None,
                )
                for p in self._parts
            )
        )

    # -- events ----------------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        """Apply one event (alias of `feed`, for `adapters.base.ReplySink`)."""
        await self.feed(event)

    async def feed(self, event: Event) -> None:
        """Apply one event. Returns without waiting for the network."""
        await self.start()
        layout = self._layout
        if layout.finished:
            log.debug("stream.event_after_end type=%s", event.type)
            return
        match event:
            case TextDelta(text=text):
                layout.append(text)
                if not self._gate_open:
                    # Text that overflowed into a second part is well past the threshold.
                    if len(self._parts) > 1 or len(layout.source.strip()) >= self._first_chars:
                        self._gate_open = True
                    elif text.strip():
                        self._content_arrived()
            case TurnEnded():
                layout.turn_ended()
                if not self._gate_open and layout.source.strip():
                    self._gate_open = True
                    self._schedule()
                return
            case RunFinished(text=text, stop_reason=reason):
                layout.reconcile(text)
                self._finalize("⏹ stopped" if reason == "cancelled" else None)
                return
            case RunFailed(message=message):
                self._finalize(f"⚠️ {message}")
                return
            case _:
                if not layout.board.apply(event):
                    return
                layout.open_part.dirty = True
                if event.type in ("tool_started", "approval_requested", "thinking_changed"):
                    self._content_arrived()
        self._schedule()

    def _finalize(self, notice: str | None) -> None:
        self._gate_open = True
        self._stop_typing()
        self._layout.finalize(notice)
        self._schedule()
        self._progress.set()

    def _content_arrived(self) -> None:
        if self._first_content_at is None and not self._gate_open:
            self._first_content_at = self._clock()
            self._spawn(self._first_send_timer())

    # -- scheduling ------------------------------------------------------------------

    def _key(self, part: Part) -> tuple[str, int, int]:
        return ("stream", self._uid, part.index)

    def _schedule(self) -> None:
        """Submit every part that has something to deliver; sends strictly in order."""
        if self._closed:
            return
        if self._outbox.closed:  # shutting down: nothing more will be delivered
            for part in self._parts:
                part.state = "failed" if part.state == "live" else part.state
            self._progress.set()
            return
        blocked = False
        for part in self._parts:
            if part.state != "live":
                continue
            if part.message_id is None:
                if blocked:
                    continue
                blocked = True  # later parts may not be sent before this one
                if part.dirty and (self._gate_open or part.index > 0):
                    self._submit(part, Priority.SEND)
            elif part.dirty:
                deleting = part.final is not None and not part.final.text
                self._submit(part, Priority.DELETE if deleting else Priority.EDIT)

    def _submit(self, part: Part, priority: Priority) -> None:
        def dropped() -> None:
            if part.state == "live":
                part.state = "failed"
                self._progress.set()

        # A message that already shows its final text needs no request, only the record.
        settled = part.message_id is not None and part.lost is None and part.final == part.delivered
        self._outbox.submit(
            self._t.chat_key,
            self._key(part),
            lambda: self._sync(part),
            priority=priority,
            pace=self._pace,
            on_drop=dropped,
            paced=not settled,
        )

    # -- delivery (runs in the outbox worker) ----------------------------------------

    async def _sync(self, part: Part) -> bool:
        """Bring one message up to date with the newest content; True if a request was made."""
        if part.state != "live" or self._closed:
            return False
        part.dirty = False
        desired = self._layout.payload(part)
        made_request, report = True, False
        try:
            if part.lost is not None:
                report = await self._find_lost(part)
            elif not desired.text:
                if part.final is None or part.message_id is None:
                    made_request = False  # nothing to show yet
                else:
                    await self._t.delete(part.message_id)
                    part.state = "done"
            elif part.message_id is None:
                part.message_id = await send_payload(self._t, desired)
                report = self._delivered(part, desired)
                if part.index == 0:
                    self._stop_typing()
            elif desired == part.delivered:
                made_request = False  # already shown: no "not modified" request
                report = self._delivered(part, desired) and part.state == "done"
            else:
                await edit_payload(self._t, part.message_id, desired)
                report = self._delivered(part, desired)
        except RateLimited:
            raise  # the outbox pauses, then retries this op with the newest content
        except MessageGone:
            log.info("stream.message_gone part=%d", part.index)
            part.state = "gone"
        except DeliveryUnknown as exc:
            if part.lost is not None:  # the transport cannot tell whether it was posted
                log.warning("stream.lost_send_given_up part=%d: %s", part.index, exc)
                part.state = "failed"
            elif part.message_id is None:  # a send: it may show, under an unknown id
                log.warning("stream.send_answer_lost part=%d: %s", part.index, exc)
                part.lost, part.dirty = desired, True
            else:  # edits and deletes are idempotent: just go again with the newest text
                log.warning("stream.answer_lost part=%d: %s", part.index, exc)
                part.dirty = True
        except DeliveryError as exc:
            part.failures += 1
            log.warning("stream.delivery_failed part=%d attempt=%d: %s", part.index, part.failures, exc)
            if part.failures >= self._max_attempts:
                part.state = "failed"
            else:
                part.dirty = True  # retried, paced like any request
        except Exception:  # task boundary inside the outbox worker
            log.exception("stream.sync_failed part=%d", part.index)
            part.state = "failed"
        if report:
            await self._report(part)
        self._schedule()
        self._progress.set()
        return made_request

    async def _find_lost(self, part: Part) -> bool:
        """Look for the message of a send whose answer was lost; True if found (adopted)."""
        lost = part.lost
        assert lost is not None
        if not isinstance(self._t, LostSendProbe):
            raise DeliveryUnknown("this transport cannot look for a lost message")
        found = await self._t.find_sent(lost.text, list(lost.entities))
        part.lost, part.dirty = None, True
        if found is None:
            log.info("stream.lost_send_absent part=%d: sending it now", part.index)
            return False
        log.info("stream.lost_send_found part=%d message=%s", part.index, found)
        part.message_id = found
        if part.index == 0:
            self._stop_typing()
        return self._delivered(part, lost)

    @staticmethod
    def _delivered(part: Part, payload: Payload) -> bool:
        """Record what the message shows; True (worth reporting)."""
        part.delivered = payload
        if part.final is not None and payload == part.final:
            part.state = "done"
        return True

    async def _report(self, part: Part) -> None:
        if self._on_delivery is None or part.message_id is None or part.delivered is None:
            return
        final = part.state == "done"
        try:
            outcome = self._on_delivery(part.index, part.message_id, part.delivered.text, final)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:  # the caller's hook must not break delivery
            log.exception("stream.on_delivery_failed part=%d", part.index)

    # -- timers ----------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _stop_typing(self) -> None:
        if self._typing_task is not None:
            self._typing_task.cancel()

    async def _typing_loop(self) -> None:
        """The indicator is a courtesy: a 429 on it only delays the next indicator. It does
        not pause the outbox — holding the answer back to show "typing…" would be absurd;
        if the chat really is flooded, the answer's own request gets its 429 and pauses."""
        while not self._layout.finished and self._parts[0].message_id is None:
            wait = self._typing_every
            if not self._outbox.paused:
                try:
                    await self._t.typing()
                except RateLimited as exc:
                    log.info("stream.typing_rate_limited retry_after=%.1f", exc.retry_after)
                    wait = max(wait, exc.retry_after)
                except DeliveryError as exc:
                    log.debug("stream.typing_failed: %s", exc)
            await self._sleep(wait)

    async def _first_send_timer(self) -> None:
        assert self._first_content_at is not None
        await self._sleep(max(0.0, self._first_content_at + self._first_after - self._clock()))
        if not self._gate_open:
            self._gate_open = True
            self._schedule()
