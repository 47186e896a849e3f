"""The `ReplySink` of one run in one Telegram chat: the shared `adapters.run_reply.RunReply`
(streamed answer, approval cards, delivery records) over Telegram transports — a group's
first message quotes the user's, cards never do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from telegram import Bot

from adapters.base import InboundHandler
from adapters.outbox import Clock, Outbox, Sleep
from adapters.run_reply import RunReply
from adapters.telegram.approval_cards import ApprovalCards
from adapters.telegram.transport import BURST, GROUP_PER_MINUTE, SentLedger, TelegramTransport
from agent_core.inbound import ReplyTarget

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


class TelegramReply(RunReply):
    """Renders one run into one chat; see the module docstring."""

    def __init__(self, ctx: ReplyContext, target: ReplyTarget) -> None:
        quoted, plain = transport_for(ctx, target, quote=True), transport_for(ctx, target, quote=False)
        super().__init__(ctx, quoted, plain, platform=PLATFORM, target=target)
