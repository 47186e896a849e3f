"""The `ReplySink` of one run in one Telegram chat: the streamed answer (`StreamRenderer`:
typing, paced edits, splitting, entities), approval cards, and persisted delivery state.

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
from dataclasses import dataclass, field

from telegram import Bot

from adapters.base import Delivery, InboundHandler
from adapters.outbox import Clock, Outbox, Sleep
from adapters.stream import StreamRenderer
from adapters.telegram.approval_cards import ApprovalCards
from adapters.telegram.transport import BURST, GROUP_PER_MINUTE, SentLedger, TelegramTransport
from agent_core.events import ApprovalRequested, ApprovalResolved, Event, RunStarted
from agent_core.inbound import ReplyTarget

log = logging.getLogger(__name__)

PLATFORM = "telegram"


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What every reply of one adapter shares."""

    bot: Bot
    outbox: Outbox
    cards: ApprovalCards
    handler: InboundHandler
    clock: Clock
    sleep: Sleep
    private_interval_s: float
    group_interval_s: float
    """Seconds between requests in one chat (`transport.EDIT_INTERVAL_S` and
    `GROUP_INTERVAL_S`, unless a test that is not about pacing shortens them)."""
    burst: int = BURST
    ledger: SentLedger = field(default_factory=SentLedger)
    """Every message this adapter sent, so a lost-send probe never edits one of them."""

    def interval_for(self, chat_id: str) -> float:
        return self.group_interval_s if is_group(chat_id) else self.private_interval_s

    def transport(
        self,
        chat_id: str,
        thread_id: int | None = None,
        reply_to: int | None = None,
        *,
        floor_id: int | None = None,
    ) -> TelegramTransport:
        """A transport with this adapter's pace, burst and ledger for one chat (and topic)."""
        return TelegramTransport(
            self.bot,
            chat_ref(chat_id),
            thread_id,
            reply_to,
            interval_s=self.interval_for(chat_id),
            burst=self.burst,
            per_minute=GROUP_PER_MINUTE if is_group(chat_id) else None,
            ledger=self.ledger,
            floor_id=floor_id,
        )


def chat_ref(chat_id: str) -> int | str:
    """Telegram chat ids are integers; "@channelname" stays a string."""
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def is_group(chat_id: str) -> bool:
    return chat_id.startswith("-")


def transport_for(ctx: ReplyContext, target: ReplyTarget, *, quote: bool) -> TelegramTransport:
    """A transport for `target`; with `quote`, its first message in a group replies to the
    user's message (private chats need no quoting)."""
    thread = int(target.thread_id) if target.thread_id else None
    answered = int(target.reply_to) if target.reply_to and target.reply_to.isdigit() else None
    reply_to = answered if quote and is_group(target.chat_id) else None
    return ctx.transport(target.chat_id, thread, reply_to, floor_id=answered)


class DeliveryLog:
    """Writes one reply's `Delivery` records in order from a single task; newer states of a
    message replace older ones not yet written."""

    def __init__(self, handler: InboundHandler) -> None:
        self._handler = handler
        self._pending: dict[int, Delivery] = {}
        self._writer: asyncio.Task[None] | None = None

    def add(self, delivery: Delivery) -> None:
        self._pending.pop(delivery.part_index, None)
        self._pending[delivery.part_index] = delivery
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain(), name="tg-delivery-log")

    async def _drain(self) -> None:
        while self._pending:
            index = next(iter(self._pending))
            delivery = self._pending.pop(index)
            try:
                await self._handler.record_delivery(delivery)
            except Exception:  # task boundary: the chat already shows it; log and go on
                log.exception("telegram.delivery_record_failed run=%s part=%d", delivery.run_id, index)

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


class TelegramReply:
    """Renders one run into one chat; see the module docstring."""

    def __init__(self, ctx: ReplyContext, target: ReplyTarget) -> None:
        self._ctx = ctx
        self._target = target
        self._cards_transport = transport_for(ctx, target, quote=False)
        self._renderer = StreamRenderer(
            transport_for(ctx, target, quote=True),
            ctx.outbox,
            on_delivery=self._delivered,
            clock=ctx.clock,
            sleep=ctx.sleep,
        )
        self._log = DeliveryLog(ctx.handler)
        self._run_id: str | None = None
        self._approvals: list[str] = []

    async def handle(self, event: Event) -> None:
        match event:
            case RunStarted(run_id=run_id):
                self._run_id = run_id
            case ApprovalRequested(approval_id=approval_id):
                self._approvals.append(approval_id)
                self._ctx.cards.show(self._cards_transport, event)
            case ApprovalResolved():
                self._ctx.cards.resolve(event)
            case _:
                pass
        await self._renderer.handle(event)

    async def aclose(self, *, cancelled: bool = False) -> None:
        try:
            for approval_id in self._approvals:
                # A run that ended is not waiting for anyone: a card still asking is stale.
                self._ctx.cards.resolve(ApprovalResolved(approval_id, "cancelled", None), only_pending=True)
            await self._renderer.aclose(cancelled=cancelled)
            await self._ctx.cards.settle(self._approvals)
        finally:
            await self._log.aclose()

    def _delivered(self, part_index: int, message_id: str, text: str, final: bool) -> None:
        if self._run_id is None:
            log.warning("telegram.delivery_without_run part=%d", part_index)
            return
        t = self._target
        self._log.add(
            Delivery(
                self._run_id,
                part_index,
                PLATFORM,
                t.chat_id,
                t.thread_id,
                message_id,
                text,
                "final" if final else "streaming",
            )
        )
