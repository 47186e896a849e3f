"""`/voice on`: the answer to a voice note also comes back spoken, after the text."""

from __future__ import annotations

import logging

from adapters.base import Adapter
from adapters.media import FileSender
from agent_core.inbound import ReplyTarget
from bot.pending import Pending
from bot.storage import Storage
from bot.tts import OpenAISpeech, SpeechError

log = logging.getLogger(__name__)


def spoke(items: list[Pending]) -> bool:
    """Whether a voice note (or audio) is among the messages a run answers."""
    return any(a.kind in ("voice", "audio") for p in items for a in p.inbound.attachments)


async def send_voice_reply(
    speech: OpenAISpeech, storage: Storage, key: str, adapter: Adapter, target: ReplyTarget, text: str
) -> None:
    """Speak `text` and send it as a voice message, if the session turned voice replies on
    and the platform sends files; a speech failure is told in the chat, never raised."""
    try:
        if not await storage.voice_replies(key) or not isinstance(adapter, FileSender):
            return
        audio = await speech.speak(text)
        await adapter.send_file(ReplyTarget(target.platform, target.chat_id, target.thread_id),
                                audio, "answer.ogg", send_as="voice")  # fmt: skip
    except SpeechError as exc:
        try:
            await adapter.send_text(target, f"🔇 I couldn't speak this answer: {exc}.")
        except Exception:
            log.exception("notice.failed", extra={"platform": target.platform})
    except Exception:
        log.exception("voice_reply.failed", extra={"session": key})
