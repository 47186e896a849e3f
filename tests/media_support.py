"""Media made in the test: images (Pillow), PDFs (pypdf), spoken voice notes (espeak-ng
speaks, PyAV encodes OGG/Opus) — real files, nothing canned."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest


def jpeg(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "JPEG")
    return out.getvalue()


def pdf(pages: int = 1, text: str = "") -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    if text:
        writer.add_metadata({"/Title": text})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def image_size(block: dict[str, Any]) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(block["source"]["data"]))) as img:
        return img.size


def spoken_ogg(phrase: str, *espeak_args: str) -> bytes:
    """`phrase` spoken by espeak-ng (with `espeak_args`, e.g. a voice), encoded as a
    Telegram-style voice note (OGG/Opus, mono)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    wav = subprocess.run(["espeak-ng", *espeak_args, "--stdout", phrase], check=True, capture_output=True).stdout
    return wav_to_ogg_opus(wav)


def wav_to_ogg_opus(wav: bytes) -> bytes:
    """Written here, not borrowed from bot.tts: the test's encoder must not be the code
    under test."""
    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as src, av.open(out, "w", format="ogg") as dst:
        stream = dst.add_stream("libopus", rate=48000)
        stream.layout = "mono"
        resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
        for frame in src.decode(audio=0):
            for f in resampler.resample(frame):
                for packet in stream.encode(f):
                    dst.mux(packet)
        for f in resampler.resample(None):
            for packet in stream.encode(f):
                dst.mux(packet)
        for packet in stream.encode(None):
            dst.mux(packet)
    return out.getvalue()


def audio_seconds(data: bytes) -> float:
    """Decoded duration of audio bytes (raises if they are not decodable audio)."""
    import av

    samples, rate = 0, 0
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    if not rate:
        raise ValueError("no audio frames")
    return samples / rate
