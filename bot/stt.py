"""Speech to text behind one small interface (`Transcriber`).

Engine `openai`: any OpenAI-compatible `POST /v1/audio/transcriptions` (OpenAI, Groq, a
local whisper server), multipart with `file` and `model`, answered with `{"text": …}`.
`local`: PocketSphinx on this machine, no service (`bot/stt_local.py`, the `local-stt` extra).
`off`: no engine; a voice note gets a one-line notice instead of a transcript.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Protocol

from bot.settings import SttSettings

OFF_NOTICE = ("🎤 I got a voice note but speech-to-text is off "
              "(set ROOST_STT__BASE_URL to an OpenAI-compatible transcription service, "
              "or install roost[local-stt]).")


class TranscriptionError(Exception):
    """Transcription failed; `str(error)` is safe to show in the chat (no key, no URL)."""


class Transcriber(Protocol):
    async def transcribe(self, audio: bytes, filename: str, mime: str) -> str: ...


class OpenAITranscriber:
    def __init__(self, base_url: str, api_key: str | None, model: str, timeout_s: float = 60.0) -> None:
        root = base_url.rstrip("/")
        self.url = f"{root}/audio/transcriptions" if root.endswith("/v1") else f"{root}/v1/audio/transcriptions"
        self._key, self._model, self._timeout = api_key, model, timeout_s

    async def transcribe(self, audio: bytes, filename: str, mime: str) -> str:
        import httpx

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                resp = await client.post(
                    self.url,
                    headers=headers,
                    data={"model": self._model, "response_format": "json"},
                    files={"file": (filename or "voice.ogg", audio, mime or "audio/ogg")},
                )
        except httpx.HTTPError as exc:
            raise TranscriptionError(f"the speech-to-text service is unreachable ({type(exc).__name__})") from None
        if resp.status_code != 200:
            raise TranscriptionError(f"the speech-to-text service answered {resp.status_code}")
        try:
            text = resp.json()["text"]
        except (ValueError, KeyError, TypeError):
            raise TranscriptionError("the speech-to-text service sent no transcript") from None
        if not isinstance(text, str):
            raise TranscriptionError("the speech-to-text service sent no transcript")
        return text.strip()


class LocalTranscriber:
    """Decodes in a child process: PocketSphinx is CPU-bound and holds the GIL (about half a
    second per phrase), which in a thread would stall every chat's event loop. A child that
    overruns the timeout, or whose caller is cancelled, is killed."""

    def __init__(self, timeout_s: float = 60.0) -> None:
        self._timeout = timeout_s

    async def transcribe(self, audio: bytes, filename: str, mime: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.stt_local",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(audio), self._timeout)
        except TimeoutError:
            raise TranscriptionError("the local speech-to-text engine took too long") from None
        finally:
            if proc.returncode is None:  # timed out or cancelled: no orphan left decoding
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            raise TranscriptionError("the local speech-to-text engine could not read the audio")
        return out.decode("utf-8", "replace").strip()


def transcriber(settings: SttSettings) -> Transcriber | None:
    """The configured engine; None when speech-to-text is off."""
    if settings.active == "openai" and settings.base_url:
        key = settings.api_key.get_secret_value() if settings.api_key else None
        return OpenAITranscriber(settings.base_url, key, settings.model, settings.timeout_s)
    if settings.active == "local":
        return LocalTranscriber(settings.timeout_s)
    return None
