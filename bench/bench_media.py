"""Media figures over the wire: PTB against the fake Bot API (getFile + downloads), the real
app, the anthropic SDK against the fake Messages API, a fake OpenAI-compatible STT server.

Run: .venv/bin/python bench/bench_media.py [--rounds 20]

Prints:
- photo update → model request p50 / p99: a 3000×2000 JPEG sent to the owner's chat, from
  the update's creation to the Messages API request carrying the resized image (getFile,
  download, save, Pillow resize off the loop, storage, prompt);
- voice note → transcript request p50 / p99: an espeak-ng phrase encoded OGG/Opus, from
  the update to the STT server receiving it;
- loop responsiveness: the worst lateness of a 10 ms ticker while 3 chats each send a
  10 MB file at once (download, save, describe), against an idle loop just before.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.stt_api import FakeStt  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tests.media_support import jpeg, spoken_ogg  # noqa: E402
from tests.telegram_harness import BOT_USERNAME, OWNER, TOKEN, running  # noqa: E402

UNLIMITED = {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 0}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def show(label: str, values: list[float]) -> None:
    print(f"{label}: p50 {statistics.median(values) * 1000:.0f} ms, p99 {pct(values, 0.99) * 1000:.0f} ms "
          f"(n={len(values)})")


async def photo_and_voice(rounds: int) -> None:
    photo = jpeg(3000, 2000)
    voice = spoken_ogg("remind me to water the plants tomorrow")
    with FakeTelegram(token=TOKEN, bot_username=BOT_USERNAME) as tg, FakeAnthropic() as llm, \
            FakeStt(transcript="remind me to water the plants tomorrow") as stt, \
            tempfile.TemporaryDirectory() as tmp:
        tg.add_chat(OWNER, type="private", first_name="Olivia")
        async with running(Path(tmp), tg, llm, paced=False, limits={"user": UNLIMITED, "group": UNLIMITED},
                           stt={"base_url": stt.base_url, "api_key": "stt-key"}) as h:
            tg.send_private(OWNER, "warm up")  # the app's own first-run costs are not media's
            await llm.await_requests(1, timeout=30)
            await h.app.conversations.lanes.drain()
            base = 1
            photo_times: list[float] = []
            for n in range(rounds):
                start = time.monotonic()
                tg.send_media(OWNER, OWNER, "photo", photo, caption=f"photo {n}")
                await llm.await_requests(base + n + 1, timeout=30)
                photo_times.append(llm.requests[base + n].received_at - start)
                await h.app.conversations.lanes.drain()
            print(f"first photo (Pillow loaded on demand): {photo_times[0] * 1000:.0f} ms")
            show("photo update → model request, after the first", photo_times[1:])
            voice_times: list[float] = []
            for n in range(rounds):
                start = time.monotonic()
                tg.send_media(OWNER, OWNER, "voice", voice, mime_type="audio/ogg")
                await tg.await_for(lambda: len(stt.requests) > n, timeout=30)
                voice_times.append(stt.requests[n].received_at - start)
                await h.app.conversations.lanes.drain()
            show("voice note → transcript request", voice_times)


async def responsiveness() -> None:
    big = bytes(range(256)) * (10 * 1024 * 1024 // 256)
    chats = [-1001, -1002, -1003]  # three groups (allowed: "*"), each mentioning the bot
    with FakeTelegram(token=TOKEN, bot_username=BOT_USERNAME) as tg, FakeAnthropic() as llm, \
            tempfile.TemporaryDirectory() as tmp:
        tg.add_chat(OWNER, type="private", first_name="Olivia")
        async with running(Path(tmp), tg, llm, paced=False, limits={"user": UNLIMITED, "group": UNLIMITED}):
            worst = [0.0]
            stop = asyncio.Event()

            async def tick() -> None:
                loop = asyncio.get_running_loop()
                start, n = loop.time(), 0
                while not stop.is_set():
                    n += 1
                    due = start + n * 0.010
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    worst[0] = max(worst[0], loop.time() - due)

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(1.0)
            idle, worst[0] = worst[0], 0.0
            start = time.monotonic()
            for chat in chats:
                tg.send_media(chat, 77, "document", big, file_name=f"data{-chat}.bin",
                              mime_type="application/octet-stream", caption="keep this", mention=True)
            await llm.await_requests(len(chats), timeout=60)
            elapsed = time.monotonic() - start
            stop.set()
            await ticker
            print(f"3 chats × 10 MB files: worst tick {worst[0] * 1000:.0f} ms late "
                  f"(idle loop {idle * 1000:.0f} ms); all 3 at the model after {elapsed:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(photo_and_voice(args.rounds))
    asyncio.run(responsiveness())


if __name__ == "__main__":
    main()
