"""Messages/s with 1, 2 and 3 replicas on one PostgreSQL, zero-latency model.

Run: eval "$(bash .ci/postgres.sh)"; .venv/bin/python bench/bench_replicas.py [--messages 600]

Each replica is its own process (the core of `bench_core.py`: an in-process instant model
and an adapter that sends nothing), all on one fresh PostgreSQL database. Messages of 30
group chats are handed round-robin to the replicas, so most of a chat's messages reach a
replica that does not hold its lane and wait in the inbox for the one that does: the figure
includes the cross-replica queueing, the lane locks and the conditional claims. The clock
runs from "go" until every inbox row is answered. The machine has 2 cores (shared with
PostgreSQL), so the per-core figure divides by min(replicas, 2).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


def main(messages: int) -> None:
    base = os.environ.get("ROOST_TEST_POSTGRES_URL")
    if not base:
        raise SystemExit('set ROOST_TEST_POSTGRES_URL (eval "$(bash .ci/postgres.sh)")')
    for replicas in (1, 2, 3):
        url, name = asyncio.run(fresh_database(base))
        try:
            rate = run(replicas, url, messages)
        finally:
            asyncio.run(drop_database(base, name))
        cores = min(replicas, 2)
        print(f"{replicas} replica{'s' if replicas > 1 else ' '}: {rate:7.0f} messages/s "
              f"({messages} messages, {CHATS} chats round-robin); {rate / cores:6.0f} per core used")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    main(parser.parse_args().messages)
