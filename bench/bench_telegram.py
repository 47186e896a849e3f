"""Telegram adapter figures over the wire: python-telegram-bot talking HTTP to the fake Bot API.

Run: .venv/bin/python bench/bench_telegram.py [--pings 200] [--rounds 5]

Prints:
- start-up: `TelegramAdapter.start` → first getUpdates arriving at the fake (in process),
  and a cold `roost run` process → first getUpdates, for a first start (a new home: the
  schema is made by a child `roost init`) and for restarts at head (no child);
- update → first Bot API call from Roost (the fake's clock: update created → request
  arrived; the first call is the typing indicator) and → the answer's sendMessage, p50 /
  p99, for 1 chat at a time and for 100 concurrent chats, with the production
  configuration (PTB's AIORateLimiter: 30 requests/s overall) and with it off:
  * adapter alone: an in-process handler answers every message at once (receive → reply
    with a canned run), so the figures are the adapter's cost;
  * whole app: `bot.app.build` with a zero-latency in-process model (storage, routing,
    lanes and the agent loop included);
- first reply in a busy private chat: an instant answer to a message sent 0.5 s after the
  chat's previous answer, update → sendMessage p50 / p99 (target p50 ≤ 60 ms: the per-chat
  token bucket lets the first send of a new reply go at once);
- a burst: a user writing ~1.8 messages/s without waiting for answers, update → sendMessage
  p50 (paced by the chat's limit alone: no typing action or notice takes an answer's slot);
- one streamed 3,000-character answer (the real anthropic SDK against the fake Messages
  API, 3 s of streaming): Bot API calls, first visible text (target ≤ 0.3 s after 30
  characters exist), edit spacing; then the same under three injected 429s with
  retry_after 2 s (PEERS.md's measure).

`--only first-reply` runs just the last two parts; `--only startup` just the start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.render.chunks import ChunkSpec, plan_chunks  # noqa: E402
from adapters.telegram import TelegramAdapter  # noqa: E402
from adapters.telegram.transport import GROUP_INTERVAL_S  # noqa: E402
from adapters.base import Delivery, Taken  # noqa: E402
from agent_core.approvals import Decision, ResolveOutcome, ResolveResult  # noqa: E402
from agent_core.events import RunFinished, RunStarted, TextDelta, Usage  # noqa: E402
from agent_core.inbound import Inbound, ReplyTarget  # noqa: E402
from agent_core.llm import LLMRequest, MessageComplete, StreamItem, TextChunk  # noqa: E402
from bot.app import Roost, build  # noqa: E402
from bot.commands import COMMANDS, GROUP_COMMANDS  # noqa: E402
from bot.settings import Settings  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import Reply, Text  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tests.fakes.telegram_state import Call  # noqa: E402

TOKEN = "123456:BENCH-token"
OWNER = 1
SPEC = ChunkSpec.create(4096, "utf16", False)
ANSWER = "ok, noted."
UNLIMITED = {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 0}


class InstantLLM:
    """A model that answers at once: the figures are Roost's cost, not a model's."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        yield TextChunk(ANSWER)
        yield MessageComplete([{"type": "text", "text": ANSWER}], "end_turn", Usage(10, 3), request.model)


class InstantHandler:
    """An `InboundHandler` that answers every message at once with a canned run, so only
    the adapter (and PTB, and HTTP) is measured."""

    def __init__(self) -> None:
        self.adapter: TelegramAdapter | None = None
        self._runs: set[asyncio.Task[None]] = set()
        self._n = 0

    async def receive(self, inbound: Inbound) -> bool:
        taken = await self.take(inbound)
        return taken is not None and await self.handle(taken)

    async def take(self, inbound: Inbound) -> Taken | None:
        return Taken(inbound, 0)

    async def handle(self, taken: Taken) -> bool:
        task = asyncio.get_running_loop().create_task(self._answer(taken.inbound))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        return True

    async def _answer(self, inbound: Inbound) -> None:
        assert self.adapter is not None
        self._n += 1
        sink = self.adapter.open_reply(ReplyTarget.of(inbound))
        try:
            await sink.handle(RunStarted(f"run{self._n}", "bench"))
            await sink.handle(TextDelta(ANSWER))
            await sink.handle(RunFinished(f"run{self._n}", "end_turn", 1, Usage(), ANSWER))
        finally:
            await sink.aclose()

    async def decide(self, approval_id: str, decision: Decision, identity: str) -> ResolveResult:
        return ResolveResult(ResolveOutcome.UNKNOWN)

    async def approve_pairing(self, platform: str, code: str, identity: str) -> str:
        return "no"

    async def record_delivery(self, delivery: Delivery) -> None:
        pass

    async def note_approval_card(self, approval_id: str, chat_ref: str) -> None:
        pass

    async def aclose(self) -> None:
        await asyncio.gather(*self._runs, return_exceptions=True)


def settings_for(home: Path, tg: FakeTelegram, llm_url: str | None = None) -> Settings:
    return Settings(
        home=home,
        owners=[f"telegram:{OWNER}"],
        anthropic_api_key="bench-key",
        anthropic_base_url=llm_url,
        telegram_bot_token=TOKEN,
        telegram={"base_url": tg.base_url, "allowed_groups": ["*"]},
        agent={"model": "claude-bench", "max_retries": 0, "queue_mode": "followup", "max_concurrent_runs": 128},
        limits={"user": UNLIMITED, "group": UNLIMITED},  # the bench's one member floods on purpose
    )


def adapter_for(tg: FakeTelegram, **kwargs: object) -> TelegramAdapter:
    """Production defaults (PTB's default HTTP clients, TLS bundle loaded) unless overridden."""
    return TelegramAdapter(TOKEN, base_url=tg.base_url, commands={**COMMANDS, **GROUP_COMMANDS}, **kwargs)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def adapter_alone(tg: FakeTelegram, **adapter_kwargs: object) -> AsyncIterator[None]:
    handler = InstantHandler()
    adapter = adapter_for(tg, **adapter_kwargs)
    handler.adapter = adapter
    await adapter.start(handler)
    try:
        yield None
    finally:
        await handler.aclose()
        await adapter.aclose()


@contextlib.asynccontextmanager
async def running(tg: FakeTelegram, *, llm_url: str | None = None, **adapter_kwargs: object) -> AsyncIterator[Roost]:
    with tempfile.TemporaryDirectory() as tmp:
        adapter = adapter_for(tg, **adapter_kwargs)
        llm = None if llm_url else InstantLLM()
        async with build(settings_for(Path(tmp), tg, llm_url), [adapter], llm=llm) as app:
            await adapter.start(app.conversations)
            try:
                yield app
                await app.conversations.lanes.drain()  # runs finish their bookkeeping first
            finally:
                await app.conversations.aclose()  # the CLI's order: runs first, then the adapter
                await adapter.aclose()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def first_call_latencies(
    calls: list[Call], sent: list[tuple[int, float]], method: str | None = None
) -> list[float]:
    """For each (chat, created_at): seconds until the first Bot API request (of `method`)
    for that chat."""
    by_chat: dict[int, list[float]] = {}
    for call in calls:
        chat = call.params.get("chat_id")
        if isinstance(chat, int) and (method is None or call.method == method):
            by_chat.setdefault(chat, []).append(call.at)
    out = []
    for chat, created in sent:
        out.append(min(t for t in by_chat.get(chat, []) if t >= created) - created)
    return out


class Answered:
    """Counts the bot's messages per chat; waiting predicates stay cheap (the fake evaluates
    them under its lock on every change, so copying every call each time would slow the
    very server being measured)."""

    def __init__(self, tg: FakeTelegram) -> None:
        self._tg = tg
        self._expected: dict[int, int] = {}

    def expect(self, chat: int) -> None:
        self._expected[chat] = self._expected.get(chat, 0) + 1

    async def wait(self, timeout: float) -> None:
        pending = dict(self._expected)

        def done() -> bool:
            for chat, n in list(pending.items()):
                if len(self._tg.bot_messages(chat)) >= n:
                    del pending[chat]
            return not pending

        await self._tg.await_for(done, timeout)


# -- start-up --------------------------------------------------------------------------


async def startup_in_process(tg: FakeTelegram, runs: int = 5) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        async with build(settings_for(Path(tmp), tg), [], llm=InstantLLM()) as app:
            for _ in range(runs):
                adapter = adapter_for(tg)
                started = time.monotonic()
                await adapter.start(app.conversations)
                await tg.await_for(lambda: tg.is_polling, timeout=10)
                times.append(time.monotonic() - started)
                await adapter.aclose()
    return times


async def startup_process(tg: FakeTelegram, llm: FakeAnthropic, restarts: int = 3) -> tuple[float, list[float]]:
    """A cold `roost run` → first getUpdates: the first start in a new home (the schema is
    created by a child `roost init`), then `restarts` starts of the same home at head (no
    child: one query says so)."""
    with tempfile.TemporaryDirectory() as tmp:
        first = await _one_start(tg, llm, tmp)
        return first, [await _one_start(tg, llm, tmp) for _ in range(restarts)]


async def _one_start(tg: FakeTelegram, llm: FakeAnthropic, home: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_"))}
    env.update(ROOST_HOME=home, ROOST_OWNERS=f'["telegram:{OWNER}"]', TELEGRAM_BOT_TOKEN=TOKEN,
               ROOST_TELEGRAM__BASE_URL=tg.base_url, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=llm.base_url)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        return time.monotonic() - started
    finally:
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, 60)
            print(f"  (`roost run` exited {time.monotonic() - stopping:.1f} s after SIGTERM)")
        except subprocess.TimeoutExpired:
            print("  (`roost run` did not exit within 60 s of SIGTERM: killed)")
            process.kill()
            process.wait()
        await tg.await_for(lambda: not tg.is_polling, timeout=30)


# -- update → first Bot API call --------------------------------------------------------


Latencies = tuple[list[float], list[float]]
"""(→ first Bot API call, → the answer's sendMessage)"""


async def one_at_a_time(
    tg: FakeTelegram, answered: Answered, pings: int, gap_s: float, first_chat: int = -2_000_000
) -> Latencies:
    """Sequential pings, each in one of 250 groups in turn, so a group's previous answer is
    always more than the 1 s per-chat pace ago and only the path itself is measured."""
    sent = []
    for i in range(pings):
        chat = first_chat - (i % 250)
        created = time.monotonic()
        tg.send_group(chat, 7, f"ping {i}", mention=True)
        sent.append((chat, created))
        answered.expect(chat)
        await answered.wait(30)
        if gap_s:
            await asyncio.sleep(gap_s)  # timing-ok: the offered load, not a wait for a result
    calls = tg.calls
    return first_call_latencies(calls, sent), first_call_latencies(calls, sent, "sendMessage")


async def concurrent_chats(tg: FakeTelegram, answered: Answered, chats: int, rounds: int) -> Latencies:
    sent = []
    for r in range(rounds):
        for c in range(chats):
            chat = -3_000_000 - c
            created = time.monotonic()
            tg.send_group(chat, 7, f"round {r}", mention=True)
            sent.append((chat, created))
            answered.expect(chat)
        await answered.wait(120)
        await asyncio.sleep(GROUP_INTERVAL_S + 0.1)  # timing-ok: each group's pace window passes between rounds
    calls = tg.calls
    return first_call_latencies(calls, sent), first_call_latencies(calls, sent, "sendMessage")


async def idle_chat(tg: FakeTelegram, answered: Answered, pings: int, idle_s: float, rest_s: float) -> Latencies:
    """One private chat, a quick exchange at a time: a message is answered, the chat idles
    `idle_s`, the next message comes (measured: update → its answer's sendMessage), then
    the user pauses `rest_s` before the next exchange. Back-to-back messages every 0.5 s
    for ever would exceed Telegram's sustained one a second per chat: those are paced."""
    sent = []
    for i in range(pings):
        tg.send_private(OWNER, f"first {i}")
        answered.expect(OWNER)
        await answered.wait(30)
        await asyncio.sleep(idle_s)  # timing-ok: the offered load (the chat idles 0.5 s)
        created = time.monotonic()
        tg.send_private(OWNER, f"quick {i}")
        sent.append((OWNER, created))
        answered.expect(OWNER)
        await answered.wait(30)
        await asyncio.sleep(rest_s)  # timing-ok: the offered load (the user reads the answer)
    calls = tg.calls
    return first_call_latencies(calls, sent), first_call_latencies(calls, sent, "sendMessage")


async def first_reply(pings: int) -> None:
    print("first reply in a private chat whose previous answer came 0.5 s earlier: update → sendMessage")
    for who, context in (("adapter alone (instant handler)", adapter_alone), ("whole app (zero-latency model)", running)):
        with FakeTelegram(token=TOKEN) as tg:
            tg.add_chat(OWNER, type="private")
            async with context(tg):
                answered = Answered(tg)
                await idle_chat(tg, answered, 2, 0.5, 2.5)  # warm-up
                first, times = await idle_chat(tg, answered, pings, 0.5, 2.5)
                _, steady = await idle_chat(tg, answered, 5, 0.5, 0.5)  # a message every 0.5 s
        print(f"  {who:<34} p50 {statistics.median(times) * 1000:6.1f} ms / p99 {pct(times, 0.99) * 1000:6.1f} ms"
              f"  (n={len(times)}; target p50 ≤ 60 ms); the reply opened (typing) at p50"
              f" {statistics.median(first) * 1000:.1f} ms")
        print(f"  {'  … messages every 0.5 s for ever':<34} p50 {statistics.median(steady) * 1000:6.1f} ms"
              f"  (held to Telegram's sustained 1/s per chat)")


async def burst(tg: FakeTelegram, messages: int, gap_s: float) -> list[float]:
    """A user writing faster than the chat's pace (one message every `gap_s`, without waiting
    for answers): update → its answer's sendMessage. The pace decides; nothing else (a typing
    action, a "⏳ Got it" notice) may take an answer's slot."""
    def answers() -> list[Call]:
        return [c for c in tg.calls if c.method == "sendMessage" and c.params.get("chat_id") == OWNER
                and c.ok and str(c.params.get("text", "")).startswith(ANSWER)]

    before = len(answers())
    sent = []
    for i in range(messages):
        created = time.monotonic()
        tg.send_private(OWNER, f"burst {i}")
        sent.append((OWNER, created))
        await asyncio.sleep(gap_s)  # timing-ok: the offered load
    await tg.await_for(lambda: len(answers()) >= before + messages, timeout=120)
    return [a.at - created for a, (_, created) in zip(answers()[before:], sent, strict=True)]


async def burst_figures(messages: int = 20, gap_s: float = 0.55) -> None:
    print(f"a burst in a private chat: {messages} messages, one every {gap_s:.2f} s (~{1 / gap_s:.1f}/s),"
          " update → its answer's sendMessage")
    with FakeTelegram(token=TOKEN) as tg:
        tg.add_chat(OWNER, type="private")
        async with running(tg):
            answered = Answered(tg)
            await idle_chat(tg, answered, 2, 0.5, 2.5)  # warm-up, then the chat rests
            times = await burst(tg, messages, gap_s)
            notices = sum(1 for m in tg.bot_messages(OWNER) if (m.text or "").startswith("⏳"))
    print(f"  whole app (zero-latency model)     p50 {statistics.median(times) * 1000:6.0f} ms / max {max(times):.2f} s"
          f"  (paced to 1 per {1.05:.2f} s after a burst of 3; busy notices sent: {notices})")


def report(label: str, latencies: Latencies) -> None:
    first, answer = latencies
    print(f"    {label:<34} first call p50 {statistics.median(first) * 1000:6.1f} / p99 {pct(first, 0.99) * 1000:6.1f} ms;"
          f"  answer p50 {statistics.median(answer) * 1000:6.1f} / p99 {pct(answer, 0.99) * 1000:6.1f} ms"
          f"  (n={len(first)})")


# -- one streamed answer --------------------------------------------------------------


def prose(chars: int) -> str:
    words = "the agent **streams** answers by editing one message in place and never sends `twice`".split()
    out, n = [], 0
    while sum(len(p) + 2 for p in out) < chars:
        out.append(f"{n}: " + " ".join(words[(n + k) % len(words)] for k in range(12)).capitalize() + ".")
        n += 1
    return "\n\n".join(out)[: chars - 1].rstrip() + "."


async def streamed_answer(inject_429: bool) -> None:
    answer = prose(3000)
    with FakeTelegram(token=TOKEN) as tg, FakeAnthropic() as llm:
        tg.add_chat(OWNER, type="private")
        delay = 3.0 / 150
        llm.script(Reply(Text(answer, chunk_size=20, delay_s=delay)))
        if inject_429:
            tg.fail_next("sendMessage", status=429, retry_after=2, chat_id=OWNER)
            tg.fail_next("editMessageText", status=429, retry_after=2, count=2, chat_id=OWNER)
        async with running(tg, llm_url=llm.base_url):
            tg.send_private(OWNER, "a long story please")
            expected = [p.text for p in plan_chunks(answer, SPEC)]
            await tg.await_for(lambda: [m.text for m in tg.bot_messages(OWNER)] == expected, timeout=60)
        calls = [c for c in tg.calls if c.params.get("chat_id") == OWNER
                 and c.method in ("sendMessage", "editMessageText")]
        ok = [c for c in calls if c.ok]
        sends = [c for c in ok if c.method == "sendMessage"]
        edits = [c for c in ok if c.method == "editMessageText"]
        not_modified = [c for c in calls if "not modified" in (c.description or "")]
        refused = [c for c in calls if c.status == 429]
        gaps = [b.at - a.at for a, b in zip(calls, calls[1:])]
        start = llm.requests[0].received_at
        label = "under 3 × 429 (retry_after 2 s)" if inject_429 else "no faults"
        print(f"  {label}:")
        print(f"    Bot API calls for the stream: {len(sends)} send + {len(edits)} edits"
              f" (+ {len(refused)} refused with 429), 'not modified': {len(not_modified)}")
        print(f"    first visible text: {sends[0].at - (start + delay):.3f} s after the first 30 characters"
              f" (target ≤ 0.3 s)"
              f" ({sends[0].at - start:.2f} s after the model started)")
        print(f"    closest two requests in the chat: {min(gaps):.3f} s apart; final text exact: "
              f"{[m.text for m in tg.bot_messages(OWNER)] == expected}, messages: {len(tg.bot_messages(OWNER))}")


async def startup_figures() -> None:
    with FakeTelegram(token=TOKEN) as tg, FakeAnthropic() as llm:
        cold, restarts = await startup_process(tg, llm)
    print("`roost run` → first getUpdates")
    print(f"  first start (migrates in a child): {cold:.2f} s")
    print(f"  restart at head (no child):        median {statistics.median(restarts):.2f} s over {len(restarts)}"
          f" (target ≤ 1.5 s)")


async def main(pings: int, rounds: int, only: str | None) -> None:
    if only == "startup":
        await startup_figures()
        return
    if only == "first-reply":
        await first_reply(min(pings, 20))
        await burst_figures()
        print("one streamed 3,000-character answer (3 s of streaming, real anthropic SDK)")
        await streamed_answer(inject_429=False)
        return
    with FakeTelegram(token=TOKEN) as tg, FakeAnthropic() as llm:
        in_process = await startup_in_process(tg)
        cold, restarts = await startup_process(tg, llm)
    print("start-up → first getUpdates")
    print(f"  TelegramAdapter.start (in process):  median {statistics.median(in_process) * 1000:.0f} ms,"
          f" max {max(in_process) * 1000:.0f} ms over {len(in_process)} starts")
    print(f"  `roost run`, first start (migrates in a child): {cold:.2f} s")
    print(f"  `roost run`, restart at head (no child):        median {statistics.median(restarts):.2f} s"
          f" over {len(restarts)} (target ≤ 1.5 s)")

    print("update created at the fake → first Bot API request (typing) / → the answer's sendMessage")
    for who, context in (("adapter alone (instant handler)", adapter_alone), ("whole app (zero-latency model)", running)):
        print(f"  {who}:")
        for label, kwargs, gap in (("limiter on", {}, 0.1), ("limiter off", {"rate_limit": False}, 0.0)):
            with FakeTelegram(token=TOKEN) as tg:
                async with context(tg, **kwargs):
                    answered = Answered(tg)
                    await one_at_a_time(tg, answered, 20, gap, first_chat=-1_000_000)  # warm-up
                    single = await one_at_a_time(tg, answered, pings, gap)
                    hundred = await concurrent_chats(tg, answered, 100, rounds)
            pace = f"1 every {gap * 1000:.0f} ms" if gap else "back to back"
            report(f"{label}, 1 chat ({pace})", single)
            report(f"{label}, 100 concurrent chats", hundred)
    print(f"  resident memory after the runs: {psutil.Process().memory_info().rss / 2**20:.0f} MB")

    await first_reply(min(pings, 20))
    await burst_figures()

    print("one streamed 3,000-character answer (3 s of streaming, real anthropic SDK)")
    await streamed_answer(inject_429=False)
    await streamed_answer(inject_429=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pings", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["first-reply", "startup"])
    args = parser.parse_args()
    asyncio.run(main(args.pings, args.rounds, args.only))
