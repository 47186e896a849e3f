"""Speech to text behind one small interface (`Transcriber`).

Engine `openai`: any OpenAI-compatible `POST /v1/audio/transcriptions` (OpenAI, Groq, a
local whisper server), multipart with `file` and `model`, answered with `{"text": …}`.
`off`: no engine; a voice note gets a one-line notice instead of a transcript.
"""

from __future__ import annotations

from typing import Protocol

from bot.settings import SttSettings

OFF_NOTICE = ("🎤 I got a voice note but speech-to-text is off "
              "(set ROOST_STT__BASE_URL to an OpenAI-compatible transcription service).")


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


def transcriber(settings: SttSettings) -> Transcriber | None:
    """The configured engine; None when speech-to-text is off."""
    if settings.active == "openai" and settings.base_url:
        key = settings.api_key.get_secret_value() if settings.api_key else None
        return OpenAITranscriber(settings.base_url, key, settings.model, settings.timeout_s)
    return None
