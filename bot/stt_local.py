"""The child process of the `local` speech-to-text engine (`bot.stt.LocalTranscriber` runs
`python -m bot.stt_local`: audio on stdin, transcript on stdout). PocketSphinx's general
US-English language model ships inside its wheel (`pip install 'roost[local-stt]'`), so it
needs no service and no download. Accuracy is far below Whisper's: a fallback for a machine
with no transcription service, not a replacement for one. Imports nothing from Roost."""

from __future__ import annotations

import io
import sys

SAMPLE_RATE = 16_000  # the rate PocketSphinx's acoustic model was trained on


def pcm16k(audio: bytes) -> bytes:
    """Any audio PyAV reads (OGG/Opus voice notes, MP3, WAV…) as 16 kHz mono signed 16-bit PCM."""
    import av

    out = bytearray()
    with av.open(io.BytesIO(audio)) as src:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        for frame in src.decode(audio=0):
            for f in resampler.resample(frame):
                out += bytes(f.planes[0])[: f.samples * 2]  # planes may be padded
        for f in resampler.resample(None):
            out += bytes(f.planes[0])[: f.samples * 2]
    return bytes(out)


def decode(audio: bytes) -> str:
    """The transcript of `audio` by the general language model (no grammar, no keyphrases)."""
    from pocketsphinx import Decoder

    decoder = Decoder(loglevel="ERROR")
    decoder.start_utt()
    decoder.process_raw(pcm16k(audio), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


if __name__ == "__main__":
    sys.stdout.write(decode(sys.stdin.buffer.read()))
