"""Core overhead with a zero-latency model: the whole path router → lane → loop → events.

Run: .venv/bin/python bench/bench_core.py [--messages 400]
Prints messages/second for 1 and 100 sessions, message → first text event latency, and the
resident memory with 1,000 idle sessions. The model is an in-process LLMClient that answers
at once, so the figures are Roost's own cost (storage writes included), not the network's;
the anthropic SDK is therefore not imported here (it adds ~70 MB to a real process).
The 1-session figure includes reloading a transcript that grows with every message.
The CPU figure is this process's (all threads) per message; on this shared 2-core machine it
is steadier than messages/s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.events import Event, RunFailed, RunFinished, TextDelta, Usage  # noqa: E402
from agent_core.inbound import Inbound, ReplyTarget  # noqa: E402
from agent_core.llm import LLMRequest, MessageComplete, StreamItem, TextChunk  # noqa: E402
from bot.app import build  # noqa: E402
from bot.heap import freeze_long_lived  # noqa: E402
from bot.settings import Settings  # noqa: E402


_NO_LIMITS = {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 0}


class InstantLLM:
    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        text = "ok, noted."
        yield TextChunk(text)
        yield MessageComplete([{"type": "text", "text": text}], "end_turn", Usage(10, 3), request.model)


class _Sink:
    def __init__(self, adapter: BenchAdapter, sent_at: float) -> None:
        self._adapter = adapter
        self._sent_at = sent_at
        self._first = True

    async def handle(self, event: Event) -> None:
        if self._first and isinstance(event, TextDelta):
            self._first = False
            self._adapter.first_text.append(time.perf_counter() - self._sent_at)
        if isinstance(event, (RunFinished, RunFailed)):
            self._adapter.done += 1
            if self._adapter.done >= self._adapter.expected:
                self._adapter.all_done.set()

    async def aclose(self, *, cancelled: bool = False) -> None:
        pass


class BenchAdapter:
    platform = "telegram"

    def __init__(self) -> None:
        self.handler = None
        self.first_text: list[float] = []
        self.done = 0
        self.expected = 0
        self.all_done = asyncio.Event()
        self.sent_at: dict[str, float] = {}
        self.cpu_per_message = 0.0

    async def start(self, handler) -> None:  # noqa: ANN001
        self.handler = handler

    async def aclose(self) -> None:
        pass

    def open_reply(self, target: ReplyTarget) -> _Sink:
        return _Sink(self, self.sent_at.get(target.chat_id, time.perf_counter()))

    async def send_text(self, target: ReplyTarget, text: str) -> str:
        return "1"

    def expect(self, n: int) -> None:
        self.done = 0
        self.expected = n
        self.all_done = asyncio.Event()
        self.first_text.clear()


async def throughput(app, adapter: BenchAdapter, sessions: int, messages: int) -> float:
    adapter.expect(messages)
    started = time.perf_counter()
    cpu_started = time.process_time()
    for i in range(messages):
        chat = str(-(i % sessions) - 1)
        adapter.sent_at[chat] = time.perf_counter()
        await adapter.handler.receive(
            Inbound("telegram", "group", chat, "7", "bench", f"@roost message {i}", mentioned=True)
        )
    await adapter.all_done.wait()
    # CPU seconds of this process (all threads) per message: steadier than wall time on a
    # shared machine, and what bounds throughput once nothing waits on I/O.
    adapter.cpu_per_message = (time.process_time() - cpu_started) / messages
    return messages / (time.perf_counter() - started)


async def first_text_latency(adapter: BenchAdapter, samples: int) -> list[float]:
    """One message at a time, so the figure is the path's own latency, not queueing."""
    latencies = []
    for i in range(samples):
        adapter.expect(1)
        chat = f"latency{i % 20}"  # short transcripts: this measures the path, not history size
        adapter.sent_at[chat] = time.perf_counter()
        await adapter.handler.receive(
            Inbound("telegram", "group", chat, "7", "bench", f"@roost ping {i}", mentioned=True)
        )
        await adapter.all_done.wait()
        latencies.extend(adapter.first_text)
    return sorted(latencies)


async def main(messages: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            home=Path(tmp), owners=["telegram:1"], anthropic_api_key="x",
            telegram={"allowed_groups": ["*"]}, agent={"queue_mode": "followup", "max_concurrent_runs": 100},
            # Flood guards and budgets off: this measures the core, not the [limits] policy.
            limits={"user": _NO_LIMITS, "group": _NO_LIMITS},
        )
        adapter = BenchAdapter()
        async with build(settings, [adapter], llm=InstantLLM()) as app:
            await adapter.start(app.conversations)
            freeze_long_lived()  # as `roost run` does once start-up is done
            await throughput(app, adapter, 1, 50)  # warm-up
            one = await throughput(app, adapter, 1, messages // 4)
            lat = await first_text_latency(adapter, 200)
            hundred = await throughput(app, adapter, 100, messages)
            print(f"throughput, 1 session:    {one:8.0f} messages/s ({messages // 4} messages, followup mode)")
            print(f"throughput, 100 sessions: {hundred:8.0f} messages/s ({messages} messages); "
                  f"CPU {adapter.cpu_per_message * 1000:.2f} ms/message "
                  f"= {1 / adapter.cpu_per_message:.0f} messages per CPU-second")
            print(
                f"message → first text event (1 session): p50 {statistics.median(lat) * 1000:.2f} ms, "
                f"p95 {lat[int(len(lat) * 0.95)] * 1000:.2f} ms"
            )
            rss_before = psutil.Process().memory_info().rss
            adapter.expect(1000)
            for i in range(1000):
                await adapter.handler.receive(
                    Inbound("telegram", "group", f"idle{i}", "7", "bench", "@roost hi", mentioned=True)
                )
            await adapter.all_done.wait()
            await app.conversations.lanes.drain()
            rss = psutil.Process().memory_info().rss
            print(f"resident memory with 1,000 idle sessions: {rss / 2**20:.0f} MB "
                  f"(+{(rss - rss_before) / 2**20:.1f} MB for the 1,000 sessions)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=400)
    asyncio.run(main(parser.parse_args().messages))
