"""Messages/s with 1, 2 and 3 replicas on one PostgreSQL, zero-latency model; and lane
hand-over latency between two replicas.

Run: eval "$(bash .ci/postgres.sh)"; .venv/bin/python bench/bench_replicas.py [--messages 600] [--trials 8]

Each replica is its own process (the core of `bench_core.py`: an in-process instant model
and an adapter that sends nothing), all on one fresh PostgreSQL database. Messages of 30
group chats are handed round-robin to the replicas, so most of a chat's messages reach a
replica that does not hold its lane and wait in the inbox for the one that does: the figure
includes the cross-replica queueing, the lane locks and the conditional claims. The clock
runs from "go" until every inbox row is answered. The machine has 2 cores (shared with
PostgreSQL), so the per-core figure divides by min(replicas, 2).

Lane hand-over (`handover`): replica A holds a session's lane with a run that streams and
never ends; a message for the session reaches replica B, which cannot take the lane, so it
waits in the inbox. Then A lets go — killed with -9, or stopped with SIGTERM (a rolling
restart) — and the figure is the time from that to B's answer to the waiting message. The
third case is an idle lane: A answered and let the lane go; the figure is from a message
reaching B to B's answer (B takes the lane at once). p50/p95 over `--trials` sessions. A lane
freed by a kill -9 is found by B's sweep (every `bot.replicas.SWEEP_S`), so that figure is
the period's half on average plus the take-over; a replica stopping gracefully says it let its
lanes go (a signal) and B sweeps at once.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import queue
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.replicas import SWEEP_S  # noqa: E402

CHATS = 30


def child(index: int, replicas: int, url: str, messages: int, ready, go, stop) -> None:  # noqa: ANN001
    asyncio.run(_child(index, replicas, url, messages, ready, go, stop))


async def _child(index: int, replicas: int, url: str, messages: int, ready, go, stop) -> None:  # noqa: ANN001
    from agent_core.inbound import Inbound
    from bench.bench_core import _NO_LIMITS, BenchAdapter, InstantLLM
    from bot.app import build
    from bot.heap import freeze_long_lived
    from bot.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            home=Path(tmp), database_url=url, owners=["telegram:1"], anthropic_api_key="x",
            telegram={"allowed_groups": ["*"]}, agent={"queue_mode": "followup", "max_concurrent_runs": 100},
            limits={"user": _NO_LIMITS, "group": _NO_LIMITS},
        )  # fmt: skip
        adapter = BenchAdapter()
        async with build(settings, [adapter], llm=InstantLLM()) as app:
            await adapter.start(app.conversations)
            await app.conversations.replay_inbox()
            freeze_long_lived()
            ready.set()
            await asyncio.to_thread(go.wait)
            for i in range(index, messages, replicas):
                chat = str(-(i % CHATS) - 1)
                await adapter.handler.receive(
                    Inbound("telegram", "group", chat, "7", "bench", f"@roost message {i}", mentioned=True)
                )
            await asyncio.to_thread(stop.wait)
            await app.conversations.aclose()


async def answered(url: str) -> int:
    import asyncpg
    from sqlalchemy.engine import make_url

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM inbox WHERE state = 'done'"))
    finally:
        await conn.close()


def run(replicas: int, url: str, messages: int) -> float:
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(replicas)]
    go, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=child, args=(i, replicas, url, messages, ready[i], go, stop)) for i in range(replicas)]
    for p in procs:
        p.start()
    try:
        for r in ready:
            if not r.wait(120):
                raise RuntimeError("a replica did not start")
        started = time.perf_counter()
        go.set()
        deadline = started + 300
        while asyncio.run(answered(url)) < messages:
            if time.perf_counter() > deadline:
                raise RuntimeError("not every message was answered within 300 s")
            time.sleep(0.05)
        return messages / (time.perf_counter() - started)
    finally:
        stop.set()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()


async def fresh_database(base: str) -> tuple[str, str]:
    import asyncpg
    from sqlalchemy.engine import make_url

    from bot.storage import Storage

    parsed = make_url(base)
    name = f"roost_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = parsed.set(database=name).render_as_string(hide_password=False)
    storage = await Storage.open(url)  # migrated once, before the replicas start
    await storage.aclose()
    return url, name


async def drop_database(base: str, name: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    admin = await asyncpg.connect(make_url(base).set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


# --- lane hand-over --------------------------------------------------------------------

def handover_child(url: str, stalls: bool, commands, events) -> None:  # noqa: ANN001
    asyncio.run(_handover_child(url, stalls, commands, events))


async def _handover_child(url: str, stalls: bool, commands, events) -> None:  # noqa: ANN001
    """A replica; with `stalls`, its answers stream and never end (until it goes)."""
    from collections.abc import AsyncIterator

    from agent_core.events import RunFinished, TextDelta, Usage
    from agent_core.inbound import Inbound
    from agent_core.llm import LLMRequest, MessageComplete, StreamItem, TextChunk
    from bench.bench_core import _NO_LIMITS, BenchAdapter
    from bot.app import build
    from bot.settings import Settings

    class HandoverLLM:
        async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
            yield TextChunk("working on it")
            if stalls:
                await asyncio.Event().wait()  # streams until this replica goes
            text = "ok, noted."
            yield MessageComplete([{"type": "text", "text": text}], "end_turn", Usage(10, 3), request.model)

    class Sink:
        def __init__(self, chat: str) -> None:
            self.chat, self.streaming = chat, False

        async def handle(self, event: object) -> None:
            if isinstance(event, TextDelta) and not self.streaming:
                self.streaming = True
                events.put(("streaming", self.chat, time.monotonic()))
            if isinstance(event, RunFinished):
                events.put(("answered", self.chat, time.monotonic()))

        async def aclose(self, *, cancelled: bool = False) -> None:
            pass

    class Adapter(BenchAdapter):
        def open_reply(self, target):  # noqa: ANN001, ANN202
            return Sink(target.chat_id)

        async def send_text(self, target, text: str, *, buttons=()) -> str:  # noqa: ANN001
            return "1"

        async def mark_interrupted(self, delivery) -> None:  # noqa: ANN001
            pass

    if os.environ.get("BENCH_LOG"):  # the replicas' own logs on stderr, to see what happened
        from bot.logs import setup_logging

        setup_logging("INFO", [])
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            home=Path(tmp), database_url=url, owners=["telegram:1"], anthropic_api_key="x",
            telegram={"allowed_groups": ["*"]}, limits={"user": _NO_LIMITS, "group": _NO_LIMITS},
        )  # fmt: skip
        adapter = Adapter()
        async with build(settings, [adapter], llm=HandoverLLM()) as app:
            await adapter.start(app.conversations)
            await app.conversations.replay_inbox()

            async def serve() -> None:
                while True:
                    chat, text = await asyncio.to_thread(commands.get)
                    await adapter.handler.receive(Inbound("telegram", "group", chat, "7", "bench", text, mentioned=True))
                    events.put(("taken", chat, time.monotonic()))

            server = asyncio.create_task(serve())
            events.put(("ready", "", time.monotonic()))
            await stopping.wait()  # SIGTERM: stop as `roost run` does (runs stopped, lanes let go)
            server.cancel()
            await app.conversations.aclose()


class Replica:
    """One `handover_child` process, driven through two queues."""

    def __init__(self, ctx, url: str, *, stalls: bool = False) -> None:  # noqa: ANN001
        self.commands, self.events = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=handover_child, args=(url, stalls, self.commands, self.events))
        self.process.start()
        self.wait_for("ready", "", 120)

    def send(self, chat: str, text: str) -> None:
        self.commands.put((chat, f"@roost {text}"))

    def wait_for(self, kind: str, chat: str, timeout: float) -> float:
        """When the replica reported `kind` for `chat` (events of other kinds are skipped)."""
        deadline = time.monotonic() + timeout
        skipped = []
        while True:
            try:
                got, on, at = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"no {kind} for {chat!r} within {timeout} s (had {skipped})") from None
            if got == kind and on == chat:
                return at
            skipped.append((got, on))

    def end(self, sig: int = signal.SIGKILL) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, sig)
        self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def handover(url: str, trials: int) -> dict[str, list[float]]:
    ctx = mp.get_context("spawn")
    figures: dict[str, list[float]] = {"kill -9": [], "SIGTERM": [], "idle": []}
    b = Replica(ctx, url)  # only A and B live meanwhile: B is the one that takes over
    try:
        for trial in range(trials):
            for case, sig in (("kill -9", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
                chat = f"-{7000 + trial}{int(sig)}"
                a = Replica(ctx, url, stalls=True)
                try:
                    a.send(chat, f"long question {trial}")
                    a.wait_for("streaming", chat, 30)  # A holds the lane
                    b.send(chat, f"waiting message {trial}")
                    b.wait_for("taken", chat, 30)  # queued in the inbox: B cannot take the lane
                    # At a random point of B's sweep period (trials would otherwise keep one phase).
                    time.sleep(random.uniform(0, SWEEP_S))  # timing-ok: the bench's own spacing
                    let_go = time.monotonic()
                    os.kill(a.process.pid, sig)
                    try:
                        figures[case].append(b.wait_for("answered", chat, 60) - let_go)
                    except RuntimeError:
                        print(asyncio.run(inbox_of(url, chat)), file=sys.stderr)
                        raise
                finally:
                    a.end()
        a = Replica(ctx, url)
        try:
            for trial in range(trials):
                chat = f"-{8000 + trial}"
                a.send(chat, f"quick question {trial}")
                a.wait_for("answered", chat, 30)
                time.sleep(0.5)  # timing-ok: A lets the lane go once its answer is closed up
                sent = time.monotonic()
                b.send(chat, f"next message {trial}")
                figures["idle"].append(b.wait_for("answered", chat, 30) - sent)
        finally:
            a.end(signal.SIGTERM)
    finally:
        b.end(signal.SIGTERM)
    return figures


async def inbox_of(url: str, chat: str) -> list[tuple[object, ...]]:
    """The chat's inbox rows and runs (printed when a hand-over did not happen)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    conn = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        rows = await conn.fetch("SELECT id, state, session_key, run_id, received_by, text FROM inbox WHERE chat_id = $1", chat)
        runs = await conn.fetch("SELECT * FROM runs ORDER BY started_at DESC LIMIT 3")
        locks = await conn.fetch("SELECT pid, classid, objid, granted FROM pg_locks WHERE locktype = 'advisory'")
        return [tuple(r) for r in rows] + [dict(r) for r in runs] + [tuple(r) for r in locks]
    finally:
        await conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(messages: int, trials: int) -> None:
    base = os.environ.get("ROOST_TEST_POSTGRES_URL")
    if not base:
        raise SystemExit('set ROOST_TEST_POSTGRES_URL (eval "$(bash .ci/postgres.sh)")')
    for replicas in (1, 2, 3) if messages else ():
        url, name = asyncio.run(fresh_database(base))
        try:
            rate = run(replicas, url, messages)
        finally:
            asyncio.run(drop_database(base, name))
        cores = min(replicas, 2)
        print(f"{replicas} replica{'s' if replicas > 1 else ' '}: {rate:7.0f} messages/s "
              f"({messages} messages, {CHATS} chats round-robin); {rate / cores:6.0f} per core used")
    if trials:
        url, name = asyncio.run(fresh_database(base))
        try:
            figures = handover(url, trials)
        finally:
            asyncio.run(drop_database(base, name))
        for case, values in figures.items():
            print(f"lane hand-over, {case:8}: p50 {percentile(values, 0.5):6.2f} s, p95 {percentile(values, 0.95):6.2f} s, "
                  f"mean {statistics.fmean(values):6.2f} s ({len(values)} sessions)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600, help="0: skip the messages/s figures")
    parser.add_argument("--trials", type=int, default=8, help="hand-over sessions per case; 0: skip")
    args = parser.parse_args()
    main(args.messages, args.trials)
