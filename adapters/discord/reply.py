"""The `ReplySink` of one run in one Discord channel: the streamed answer (`StreamRenderer`:
typing, edits ≥ 1.2 s apart per channel, split at 2000 characters with fences balanced),
approval cards, and persisted delivery state: the shared `adapters.run_reply.RunReply` over
Discord transports (a thread is a channel of its own; only the first message quotes).
"""

from __future__ import annotations

from dataclasses import dataclass

import discord

from adapters.base import InboundHandler
from adapters.discord.approval_views import DiscordCards
from adapters.discord.transport import DiscordTransport
from adapters.outbox import Clock, Outbox, Sleep
from adapters.run_reply import RunReply
from agent_core.inbound import ReplyTarget

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


class DiscordReply(RunReply):
    """Renders one run into one channel; see the module docstring."""

    def __init__(self, ctx: ReplyContext, target: ReplyTarget, *, quote: bool) -> None:
        answer, cards = ctx.transport_for(target, quote=quote), ctx.transport_for(target, quote=False)
        super().__init__(ctx, answer, cards, platform=PLATFORM, target=target)
