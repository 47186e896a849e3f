"""Telegram's side of attachments: which files a message carries, and fetching one by its
file_id (getFile, then the file URL; a file_path is only valid for a while, so it is asked
for at fetch time, never stored)."""

from __future__ import annotations

from typing import Any

from telegram import Message
from telegram.error import BadRequest, TelegramError

from adapters.media import TooBig, Unavailable
from agent_core.inbound import Attachment

BOT_DOWNLOAD_LIMIT = 20 * 1024 * 1024
"""The Bot API serves files up to 20 MB to bots (getFile answers "file is too big")."""


def attachments_of(message: Message) -> tuple[Attachment, ...]:
    """The files of a message: the largest size of a photo, a document, a voice note or audio."""
    if message.photo:
        best = message.photo[-1]  # Telegram lists sizes smallest first
        return (Attachment("photo", best.file_id, f"photo_{message.message_id}.jpg", "image/jpeg", best.file_size or None),)
    if message.document is not None:
        d = message.document
        return (Attachment("document", d.file_id, d.file_name or "", d.mime_type or "", d.file_size or None),)
    if message.voice is not None:
        v = message.voice
        return (Attachment("voice", v.file_id, f"voice_{message.message_id}.ogg", v.mime_type or "audio/ogg", v.file_size or None),)
    if message.audio is not None:
        a = message.audio
        return (Attachment("audio", a.file_id, a.file_name or "", a.mime_type or "", a.file_size or None),)
    return ()


async def fetch(bot: Any, attachment: Attachment, max_bytes: int) -> bytes:
    """See `adapters.media.MediaFetcher.fetch_attachment`."""
    limit = min(max_bytes, BOT_DOWNLOAD_LIMIT)
    if attachment.size is not None and attachment.size > limit:
        raise TooBig(attachment.size, limit, attachment.name)
    try:
        file = await bot.get_file(attachment.ref)
    except BadRequest as exc:
        if "too big" in exc.message.lower():
            raise TooBig(attachment.size, limit, attachment.name) from None
        raise Unavailable(f"Telegram would not give me that file ({exc.message}).") from None
    except TelegramError as exc:
        raise Unavailable(f"I couldn't fetch that file from Telegram ({exc}).") from None
    if file.file_size is not None and file.file_size > limit:
        raise TooBig(file.file_size, limit, attachment.name)
    try:
        data = bytes(await file.download_as_bytearray())
    except TelegramError as exc:
        raise Unavailable(f"I couldn't download that file from Telegram ({exc}).") from None
    if len(data) > limit:
        raise TooBig(len(data), limit, attachment.name)
    return data
