"""Fetching the files that come with messages: one contract for every platform.

An adapter that can fetch attachments implements `MediaFetcher`; the caller passes the byte
cap (ROOST_MEDIA__MAX_MB) and gets the bytes, or one of the errors below whose message can
be shown in the chat as it is. Nothing is written anywhere here: a refused file leaves no
trace on disk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal, Protocol, runtime_checkable

from agent_core.inbound import Attachment, ReplyTarget

MB = 1024 * 1024


class MediaError(Exception):
    """A file could not be fetched; `str(error)` is a sentence for the chat."""


class TooBig(MediaError):
    def __init__(self, size: int | None, max_bytes: int, name: str = "") -> None:
        self.size, self.max_bytes = size, max_bytes
        super().__init__(too_big_message(size, max_bytes, name))


class Unavailable(MediaError):
    """Gone, expired or refused by the platform (not a size problem)."""


def mb(size: int) -> str:
    value = size / MB
    return f"{value:.0f} MB" if value >= 10 else f"{value:.1f} MB".replace(".0 MB", " MB")


def too_big_message(size: int | None, max_bytes: int, name: str = "") -> str:
    what = f"“{name}”" if name else "that file"
    if size is None:
        return f"{what} is too big to download; I take up to {mb(max_bytes)}."
    return f"{what} is {mb(size)}; I take up to {mb(max_bytes)}."


async def read_capped(chunks: AsyncIterator[bytes], max_bytes: int, name: str = "") -> bytes:
    """Read a stream, refusing as soon as it passes `max_bytes` (a lying size header or a
    platform that declares none cannot make us hold more)."""
    buf = bytearray()
    async for chunk in chunks:
        buf += chunk
        if len(buf) > max_bytes:
            raise TooBig(None, max_bytes, name)
    return bytes(buf)


SendAs = Literal["document", "photo", "voice"]


@runtime_checkable
class FileSender(Protocol):
    """Optional for an adapter: send a file to a chat (the `send_file` tool, voice replies)."""

    async def send_file(
        self, target: ReplyTarget, data: bytes, filename: str, *, caption: str = "", send_as: SendAs = "document"
    ) -> str:
        """Post `data` as `filename`: a photo (shown inline), a voice message (OGG/Opus) or
        a document. Returns the platform message id; raises `DeliveryError` on failure."""
        ...


@runtime_checkable
class MediaFetcher(Protocol):
    """Optional for an adapter: fetch an attachment of a message it delivered."""

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's bytes; raises `TooBig` over `max_bytes` (before downloading when the
        platform says the size), `Unavailable` when the platform cannot give it."""
        ...
