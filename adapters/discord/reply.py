"""The `ReplySink` of one run in one Discord channel: the streamed answer (`StreamRenderer`:
typing, edits ≥ 1.2 s apart per channel, split at 2000 characters with fences balanced),
approval cards, and persisted delivery state — the same contract as
`adapters.telegram.reply` (delivery records through the shared `DeliveryLog`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import discord

from adapters.base import Delivery, InboundHandler
from adapters.discord.approval_views import DiscordCards
from adapters.discord.transport import DiscordTransport
from adapters.outbox import Clock, Outbox, Sleep
from adapters.stream import StreamRenderer
from adapters.telegram.reply import DeliveryLog
from agent_core.events import ApprovalRequested, ApprovalResolved, Event, RunStarted
from agent_core.inbound import ReplyTarget

log = logging.getLogger(__name__)

PLATFORM = "discord"


@dataclass(frozen=True, slots=True)
class ReplyContext:
    """What every reply of one adapter shares."""

    client: discord.Client
    outbox: Outbox
    cards: DiscordCards
    handler: InboundHandler
    clock: Clock
    sleep: Sleep
    interval_s: float

    def transport(self, channel_id: str | int, *, reply_to: int | None = None) -> DiscordTransport:
        channel = self.client.get_partial_messageable(int(channel_id))
        return DiscordTransport(channel, reply_to=reply_to, interval_s=self.interval_s)

    def transport_for(self, target: ReplyTarget, *, quote: bool) -> DiscordTransport:
        """A thread is a channel of its own on Discord: replies go to the thread."""
        channel = target.thread_id or target.chat_id
        answered = int(target.reply_to) if quote and target.reply_to and target.reply_to.isdigit() else None
        return self.transport(channel, reply_to=answered)


class DiscordReply:
    """Renders one run into one channel; see the module docstring."""

    def __init__(self, ctx: ReplyContext, target: ReplyTarget, *, quote: bool) -> None:
        self._ctx = ctx
        self._target = target
        self._cards_transport = ctx.transport_for(target, quote=False)
        self._renderer = StreamRenderer(
            ctx.transport_for(target, quote=quote),
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
                # A run that ended waits for nobody: a card still asking is stale.
                self._ctx.cards.resolve(ApprovalResolved(approval_id, "cancelled", None), only_pending=True)
            await self._renderer.aclose(cancelled=cancelled)
            await self._ctx.cards.settle(self._approvals)
        finally:
            await self._log.aclose()

    def _delivered(self, part_index: int, message_id: str, text: str, final: bool) -> None:
        if self._run_id is None:
            log.warning("discord.delivery_without_run part=%d", part_index)
            return
        t = self._target
        state = "final" if final else "streaming"
        self._log.add(Delivery(self._run_id, part_index, PLATFORM, t.chat_id, t.thread_id, message_id, text, state))
