"""The `ReplySink` of one run in one chat, on any platform: the streamed answer
(`StreamRenderer`), approval cards (`adapters.cards.Cards`), and persisted delivery state.
A platform's reply only chooses the transports.

Contract, beyond `adapters.base.ReplySink`:
- every message the renderer delivers is recorded through `InboundHandler.record_delivery`
  with the run id from `RunStarted` ("streaming", then "final" once the message shows its
  final text). Records are written by one writer task per reply (a newer state of a message
  replaces one not yet written), so the database never holds up the shared outbox, and a
  record is only made after the chat shows it (it may lag the chat by one write, never lead);
- a message that never reached its final text stays "streaming", so a restart marks it;
- `aclose` leaves every card of this run decided: an approval whose resolution never
  reached the sink (the run was cancelled mid-wait) is shown as cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from adapters.base import Delivery, InboundHandler
from adapters.cards import Cards
from adapters.outbox import Clock, Outbox, Sleep
from adapters.stream import RenderResult, StreamRenderer
from adapters.transport import ChatTransport
from agent_core.events import ApprovalRequested, ApprovalResolved, Event, RunStarted
from agent_core.inbound import ReplyTarget

log = logging.getLogger(__name__)


class DeliveryLog:
    """Writes one reply's `Delivery` records in order from a single task; newer states of a
    message replace older ones not yet written."""

    def __init__(self, handler: InboundHandler, platform: str) -> None:
        self._handler = handler
        self._platform = platform
        self._pending: dict[int, Delivery] = {}
        self._writer: asyncio.Task[None] | None = None

    def add(self, delivery: Delivery) -> None:
        self._pending.pop(delivery.part_index, None)
        self._pending[delivery.part_index] = delivery
        if self._writer is None or self._writer.done():
            loop = asyncio.get_running_loop()
            self._writer = loop.create_task(self._drain(), name=f"{self._platform}-delivery-log")

    async def _drain(self) -> None:
        while self._pending:
            index = next(iter(self._pending))
            delivery = self._pending.pop(index)
            try:
                await self._handler.record_delivery(delivery)
            except Exception:  # task boundary: the chat already shows it; log and go on
                log.exception("%s.delivery_record_failed run=%s part=%d", self._platform, delivery.run_id, index)

    async def aclose(self) -> None:
        """Wait until everything added is written."""
        writer = self._writer
        if writer is None:
            return
        try:
            await writer
        except asyncio.CancelledError:
            writer.cancel()
            raise


class ReplyDeps(Protocol):
    """What every reply of one adapter shares (a platform's `ReplyContext`)."""

    @property
    def outbox(self) -> Outbox: ...
    @property
    def cards(self) -> Cards: ...
    @property
    def handler(self) -> InboundHandler: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def sleep(self) -> Sleep: ...


class RunReply:
    """Renders one run into one chat; see the module docstring. `transport` carries the
    answer, `cards_transport` the approval cards (which never quote the user)."""

    def __init__(
        self, deps: ReplyDeps, transport: ChatTransport, cards_transport: Any, *, platform: str, target: ReplyTarget
    ) -> None:
        self._cards = deps.cards
        self._cards_transport = cards_transport
        self._platform = platform
        self._target = target
        self._renderer = StreamRenderer(
            transport, deps.outbox, on_delivery=self._delivered, clock=deps.clock, sleep=deps.sleep
        )
        self._log = DeliveryLog(deps.handler, platform)
        self._run_id: str | None = None
        self._approvals: list[str] = []

    async def handle(self, event: Event) -> None:
        match event:
            case RunStarted(run_id=run_id):
                self._run_id = run_id
            case ApprovalRequested(approval_id=approval_id):
                self._approvals.append(approval_id)
                self._cards.show(self._cards_transport, event)
            case ApprovalResolved():
                self._cards.resolve(event)
            case _:
                pass
        await self._renderer.handle(event)

    async def aclose(self, *, cancelled: bool = False) -> None:
        try:
            for approval_id in self._approvals:
                # A run that ended is not waiting for anyone: a card still asking is stale.
                self._cards.resolve(ApprovalResolved(approval_id, "cancelled", None), only_pending=True)
            await self._renderer.aclose(cancelled=cancelled)
            await self._cards.settle(self._approvals)
        finally:
            await self._log.aclose()

    def result(self) -> RenderResult:
        """What each message of the answer shows (complete once `aclose` returned)."""
        return self._renderer.result()

    def _delivered(self, part_index: int, message_id: str, text: str, final: bool) -> None:
        if self._run_id is None:
            log.warning("%s.delivery_without_run part=%d", self._platform, part_index)
            return
        t = self._target
        state = "final" if final else "streaming"
        delivery = Delivery(self._run_id, part_index, self._platform, t.chat_id, t.thread_id, message_id, text, state)
        self._log.add(delivery)
