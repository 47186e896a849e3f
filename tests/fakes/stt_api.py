"""A fake OpenAI-compatible audio server: speech to text (`POST /v1/audio/transcriptions`)
and text to speech (`POST /v1/audio/speech`, spoken for real by espeak-ng; OGG/Opus when
`response_format` is "opus", unless `speech_as_wav` makes it answer WAV as some local
servers do).

Strict where it matters: multipart with a `file` part and a `model` field, a bearer key when
one is configured, and the file must decode as audio (PyAV) with at least 0.3 s of sound —
otherwise 400 like OpenAI's "Invalid file format". Answers `{"text": …}` from `transcript`
(a string or a function of the decoded seconds). `down = True` answers 503.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True, slots=True)
class SttRequest:
    model: str
    filename: str
    content_type: str
    seconds: float
    status: int
    received_at: float
    """time.monotonic() when the request arrived."""


class FakeStt:
    def __init__(self, *, api_key: str | None = "stt-key", transcript: str | Callable[[float], str] = "") -> None:
        self.api_key = api_key
        self.transcript = transcript
        self.down = False
        self.requests: list[SttRequest] = []
        self.speech_requests: list[dict[str, object]] = []
        self.speech_as_wav = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> FakeStt:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def start() -> None:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/audio/transcriptions", self._transcribe)
            app.router.add_post("/v1/audio/speech", self._speech)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self._port = self._runner.addresses[0][1]

        loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        assert self._runner is not None
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    def _record(self, request: SttRequest) -> None:
        with self._lock:
            self.requests.append(request)

    async def _transcribe(self, request: web.Request) -> web.Response:
        if self.down:
            return _error(503, "Service Unavailable")
        arrived = time.monotonic()
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided")
        if not (request.content_type or "").startswith("multipart/"):
            return _error(400, "Could not parse multipart form")
        fields: dict[str, str] = {}
        audio: tuple[str, str, bytes] | None = None
        async for part in await request.multipart():
            data = await part.read()  # type: ignore[union-attr]
            if part.name == "file":  # type: ignore[union-attr]
                audio = (part.filename or "", part.headers.get("Content-Type", ""), bytes(data))  # type: ignore[union-attr]
            else:
                fields[part.name or ""] = data.decode()  # type: ignore[union-attr]
        if "model" not in fields:
            return _error(400, "you must provide a model parameter")
        if audio is None:
            return _error(400, "file: Field required")
        try:
            seconds = await asyncio.to_thread(_decoded_seconds, audio[2])
        except Exception:
            seconds = 0.0
        status = 200 if seconds >= 0.3 else 400
        self._record(SttRequest(fields["model"], audio[0], audio[1], seconds, status, arrived))
        if status != 200:
            return _error(400, "Invalid file format. Supported formats: flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm")
        text = self.transcript(seconds) if callable(self.transcript) else self.transcript
        return web.json_response({"text": text})


    async def _speech(self, request: web.Request) -> web.Response:
        if self.down:
            return _error(503, "Service Unavailable")
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        for name in ("model", "input", "voice"):
            if not isinstance(body.get(name), str) or not body[name]:
                return _error(400, f"'{name}' is a required property")
        if len(body["input"]) > 4096:
            return _error(400, "'input' is too long: at most 4096 characters")
        fmt = body.get("response_format", "mp3")
        if fmt not in ("mp3", "opus", "aac", "flac", "wav", "pcm"):
            return _error(400, f"Invalid response_format {fmt!r}")
        with self._lock:
            self.speech_requests.append(dict(body))
        wav = await asyncio.to_thread(_espeak_wav, body["input"])
        if fmt == "opus" and not self.speech_as_wav:
            from tests.media_support import wav_to_ogg_opus

            return web.Response(body=await asyncio.to_thread(wav_to_ogg_opus, wav), content_type="audio/ogg")
        return web.Response(body=wav, content_type="audio/wav")


def _espeak_wav(text: str) -> bytes:
    import subprocess

    return subprocess.run(["espeak-ng", "--stdout", text[:500]], check=True, capture_output=True).stdout


def _decoded_seconds(data: bytes) -> float:
    import av

    samples, rate = 0, 0
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    return samples / rate if rate else 0.0


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=status)
