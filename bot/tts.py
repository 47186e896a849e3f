"""Text to speech for voice replies (`/voice on`): any OpenAI-compatible
`POST /v1/audio/speech` (ROOST_TTS__*). Telegram plays only OGG/Opus as a voice message, so
whatever the service sends is checked with PyAV and transcoded to OGG/Opus when it is not
that already (off the event loop)."""

from __future__ import annotations

import asyncio
import io

from bot.settings import TtsSettings

MAX_SPOKEN_CHARS = 4_000
"""OpenAI's input limit is 4,096 characters; a longer answer is spoken up to here."""


class SpeechError(Exception):
    """Synthesis failed; `str(error)` is safe to show (no key, no URL)."""


class OpenAISpeech:
    def __init__(self, base_url: str, api_key: str | None, model: str, voice: str, timeout_s: float = 60.0) -> None:
        root = base_url.rstrip("/")
        self.url = f"{root}/audio/speech" if root.endswith("/v1") else f"{root}/v1/audio/speech"
        self._key, self._model, self._voice, self._timeout = api_key, model, voice, timeout_s

    async def speak(self, text: str) -> bytes:
        """`text` spoken, as OGG/Opus bytes."""
        import httpx

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        body = {"model": self._model, "voice": self._voice, "input": text[:MAX_SPOKEN_CHARS], "response_format": "opus"}
        try:
            async with httpx.AsyncClient(timeout=self._timeout) as client:
                resp = await client.post(self.url, headers=headers, json=body)
        except httpx.HTTPError as exc:
            raise SpeechError(f"the text-to-speech service is unreachable ({type(exc).__name__})") from None
        if resp.status_code != 200 or not resp.content:
            raise SpeechError(f"the text-to-speech service answered {resp.status_code}")
        return await asyncio.to_thread(as_ogg_opus, resp.content)


def as_ogg_opus(data: bytes) -> bytes:
    """`data` if it already is OGG/Opus audio, else transcoded to it (mono, 48 kHz)."""
    import av

    try:
        with av.open(io.BytesIO(data)) as probe:
            stream = probe.streams.audio[0]
            if probe.format.name == "ogg" and stream.codec_context.name == "opus":
                return data
    except (av.FFmpegError, IndexError) as exc:
        raise SpeechError(f"the text-to-speech service sent no audio I can read ({type(exc).__name__})") from None
    out = io.BytesIO()
    try:
        with av.open(io.BytesIO(data)) as src, av.open(out, "w", format="ogg") as dst:
            enc = dst.add_stream("libopus", rate=48000)
            enc.layout = "mono"
            resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
            for frame in src.decode(audio=0):
                for f in resampler.resample(frame):
                    for packet in enc.encode(f):
                        dst.mux(packet)
            for f in resampler.resample(None):
                for packet in enc.encode(f):
                    dst.mux(packet)
            for packet in enc.encode(None):
                dst.mux(packet)
    except av.FFmpegError as exc:
        raise SpeechError(f"the spoken answer could not be encoded ({type(exc).__name__})") from None
    return out.getvalue()


def speech(settings: TtsSettings) -> OpenAISpeech | None:
    if not settings.base_url:
        return None
    key = settings.api_key.get_secret_value() if settings.api_key else None
    return OpenAISpeech(settings.base_url, key, settings.model, settings.voice, settings.timeout_s)
