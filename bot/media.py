"""A message's attachments → the run's content: fetched through the adapter (capped at
ROOST_MEDIA__MAX_MB), saved in the chat's own inbox folder (workspace.media_files), turned
into image/document/text blocks off the event loop (agent_core.media), voice notes
transcribed (bot.stt) and the transcript shown in the chat.

Invariant: a file is written only into the inbox of the session the message was routed to;
a refused file (too big, unavailable) is written nowhere and the sender is told why."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from adapters.media import MediaError, MediaFetcher, TooBig, too_big_message
from agent_core.inbound import Attachment, Inbound
from agent_core.prompt import frame_untrusted
from agent_core.risk import Scope
from bot.stt import OFF_NOTICE, Transcriber, TranscriptionError
from workspace import media_files

log = logging.getLogger(__name__)

Notify = Callable[[str], Awaitable[None]]
QUOTE_CHARS = 300


class VoicePending(Exception):
    """A voice note was kept but not transcribed; the message waits for a retry."""

    def __init__(self, reason: str, saved: PurePosixPath) -> None:
        self.reason, self.saved = reason, saved
        super().__init__(reason)

    @property
    def notice(self) -> str:
        return (f"🎤 I couldn't transcribe your voice note: {self.reason}. The audio is kept "
                f"({self.saved}); send /retry or any message and I'll try again.")


@dataclass(frozen=True, slots=True)
class MessageMedia:
    """What one message becomes: `blocks` before its text, and its new text (the caption or
    transcript with a note per file); `text` empty and no blocks: nothing left to answer."""

    blocks: list[dict[str, Any]]
    text: str


@dataclass
class MediaIntake:
    workspace: Path
    max_bytes: int
    max_images: int = 10
    stt: Transcriber | None = None
    _saved: dict[tuple[str, str], PurePosixPath] = field(default_factory=dict)
    """Files already saved for a message that waits for a retry (no second copy)."""

    def oversized(self, inbound: Inbound) -> tuple[Inbound, list[str]]:
        """Before a message is queued: attachments the platform says are too big are dropped,
        with a notice each (nothing is fetched or stored for them)."""
        kept: list[Attachment] = []
        notices: list[str] = []
        for a in inbound.attachments:
            if a.size is not None and a.size > self.max_bytes:
                notices.append(_sentence(too_big_message(a.size, self.max_bytes, a.name)))
            else:
                kept.append(a)
        if len(kept) == len(inbound.attachments):
            return inbound, []
        return dataclasses.replace(inbound, attachments=tuple(kept)), notices

    async def prepare(
        self, adapter: object, key: str, scope: Scope, inbound: Inbound, images: list[int], notify: Notify
    ) -> MessageMedia:
        """See the module docstring. `images` counts this turn's image blocks (shared by its
        messages). Raises `VoicePending` when a voice note could not be transcribed."""
        blocks: list[dict[str, Any]] = []
        notes: list[str] = []
        spoken: list[str] = []
        for index, attachment in enumerate(inbound.attachments):
            cache_key = (inbound.update_id or inbound.message_id or "", f"{index}:{attachment.ref}")
            saved = self._saved.get(cache_key)
            try:
                if saved is not None:
                    data = await asyncio.to_thread((self.workspace / saved).read_bytes)
                else:
                    data = await self._fetch(adapter, attachment)
                    saved = await asyncio.to_thread(
                        media_files.save, self.workspace, key, attachment.name or _default_name(attachment), data
                    )
            except MediaError as exc:
                await notify(_sentence(str(exc)))
                continue
            except OSError:
                log.exception("media.save_failed", extra={"session": key})
                await notify("I couldn't save that file; please send it again.")
                continue
            if attachment.kind in ("voice", "audio"):
                if self.stt is None:
                    await notify(OFF_NOTICE)
                    notes.append(f"[voice note saved as {saved}; not transcribed: speech-to-text is off]")
                    continue
                try:
                    text = await self.stt.transcribe(data, saved.name, attachment.mime)
                except TranscriptionError as exc:
                    self._saved[cache_key] = saved
                    raise VoicePending(str(exc), saved) from None
                self._saved.pop(cache_key, None)
                quote = text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"
                await notify(f'🎤 "{quote}"' if text else "🎤 (no speech recognised)")
                if text:
                    spoken.append(text)
                notes.append(f"[voice note saved as {saved}; its transcript is the message]")
                continue
            allowed = images[0] < self.max_images
            from agent_core.media import prepare

            ready = await asyncio.to_thread(
                prepare, data, attachment.name, attachment.mime, saved, image_allowed=allowed
            )
            for block in ready.blocks:
                if block["type"] == "image":
                    images[0] += 1
                if block["type"] == "text" and scope is Scope.SUB:
                    block = {"type": "text", "text": frame_untrusted(block["text"], f"file {saved.name}")}
                blocks.append(block)
            notes.append(ready.note)
        has_content = bool(blocks or spoken or inbound.text.strip())
        parts = [*spoken, inbound.text.strip(), *(notes if has_content else [])]
        return MessageMedia(blocks, "\n".join(p for p in parts if p))

    async def _fetch(self, adapter: object, attachment: Attachment) -> bytes:
        if not isinstance(adapter, MediaFetcher):
            raise MediaError("I can't fetch files on this platform yet.")
        if attachment.size is not None and attachment.size > self.max_bytes:
            raise TooBig(attachment.size, self.max_bytes, attachment.name)
        return await adapter.fetch_attachment(attachment, self.max_bytes)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _default_name(attachment: Attachment) -> str:
    return {"photo": "photo.jpg", "voice": "voice.ogg", "audio": "audio"}.get(attachment.kind, "file")
