"""A platform event turned into one platform-free value, the only thing the router reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

ChatKind = Literal["private", "group"]


@dataclass(frozen=True, slots=True)
class Inbound:
    platform: str
    """"telegram", "discord" or "console"."""
    chat_kind: ChatKind
    chat_id: str
    sender_id: str
    sender_name: str
    text: str
    thread_id: str | None = None
    mentioned: bool = False
    """The bot was @-mentioned or the message replies to one of the bot's messages."""
    message_id: str | None = None
    update_id: str | None = None
    """Platform delivery id, for de-duplication of redelivered updates."""
    received_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    space_id: str | None = None
    """What holds the chat on platforms that nest chats: the guild (server) id on Discord;
    None on Telegram, in DMs and on the console."""

    @property
    def identity(self) -> str:
        return f"{self.platform}:{self.sender_id}"


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Where a reply goes: a chat (and topic/thread), optionally answering one message."""

    platform: str
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None

    @classmethod
    def of(cls, inbound: Inbound) -> ReplyTarget:
        return cls(inbound.platform, inbound.chat_id, inbound.thread_id, inbound.message_id)
