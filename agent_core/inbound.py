"""A platform event turned into one platform-free value, the only thing the router reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

ChatKind = Literal["private", "group"]
AttachmentKind = Literal["photo", "document", "voice", "audio"]


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message. Only a reference is kept (durable in the inbox); the
    bytes are fetched by the adapter of `Inbound.platform` when the run needs them."""

    kind: AttachmentKind
    ref: str
    """How the platform fetches it again: a Telegram file_id, a Discord attachment URL."""
    name: str = ""
    """The sender's file name (untrusted; sanitised before it names anything on disk)."""
    mime: str = ""
    size: int | None = None
    """Bytes, as the platform declared them (None: not said)."""

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "ref": self.ref, "name": self.name, "mime": self.mime, "size": self.size}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Attachment:
        size = data.get("size")
        kind = str(data.get("kind"))
        return cls(
            kind=kind if kind in ("photo", "document", "voice", "audio") else "document",  # type: ignore[arg-type]
            ref=str(data.get("ref", "")),
            name=str(data.get("name") or ""),
            mime=str(data.get("mime") or ""),
            size=size if isinstance(size, int) else None,
        )


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
    attachments: tuple[Attachment, ...] = ()
    album_id: str | None = None
    """Telegram's media_group_id: the parts of one album are answered in one turn."""

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
