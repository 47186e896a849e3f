"""Memory search benchmark: build the SQLite index over a synthetic workspace of daily logs
(default 10,000 files, ~50 MB) and measure query latency over ~200 varied queries.

    .venv/bin/python bench/bench_memory_search.py [--files N] [--queries Q] [--seed S]
        [--verbose] [--postgres-url postgresql+asyncpg://...]

Target: p95 < 20 ms per search on SQLite. With --postgres-url the same run goes against
PostgreSQL instead, inside a throw-away schema `roost_bench_<pid>` that is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine  # noqa: E402

from agent_core.risk import Scope  # noqa: E402
from workspace.daily_log import log_path  # noqa: E402
from workspace.memory_index import MemoryIndex, create_memory_tables  # noqa: E402
from workspace.scoped_memory import ScopedMemory  # noqa: E402

FILE_BYTES = 5_000
COMMON = (
    "the a and to of in is it that for on with we you this was be at are as have not but "
    "they he she from or by one had all there what so out if about who get which go me when "
    "make can like time just him know take people into year your good some could them see "
    "other than then now look only come its over think also back after use two how our work "
    "first well way even new want because any these give day most us meeting project budget "
    "call email plan review deadline trip dinner doctor invoice release bug deploy server "
    "family weekend birthday flight hotel train coffee lunch report draft notes idea"
).split()
NAMES = "alice bob carol dave erin frank grace heidi ivan judy mallory oscar peggy trent".split()


def _vocabulary(rng: random.Random, size: int = 6_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choices(letters, k=rng.randint(4, 10))) for _ in range(size)}
    return sorted(words)


def _sentence(rng: random.Random, words: list[str], cum: list[float]) -> str:
    return " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(8, 24))).capitalize() + "."


def generate(root: Path, files: int, rng: random.Random, rare: list[str]) -> int:
    words = COMMON + NAMES + rare
    # Zipf-like: common words dominate, the rare vocabulary forms the long tail.
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(words))]
    cum = list(itertools.accumulate(weights))
    sessions = ["main"] + [f"group:telegram:-100{i}" for i in range(30)] + [
        f"dm:discord:{1000 + i}" for i in range(20)
    ]
    main_days = files * 35 // 100
    per_sub = max(1, (files - main_days) // (len(sessions) - 1))
    start = date(2025, 6, 30)
    total = written = 0
    for key in sessions:
        days = main_days if key == "main" else per_sub
        for d in range(days):
            if written >= files:
                break
            day = start - timedelta(days=d)
            parts = [f"# {day.isoformat()}\n"]
            size = 0
            while size < FILE_BYTES:
                hh, mm = rng.randint(7, 23), rng.randint(0, 59)
                who = rng.choice(NAMES)
                body = " ".join(_sentence(rng, words, cum) for _ in range(rng.randint(1, 4)))
                entry = f"\n### {hh:02d}:{mm:02d}:00\n**{who}** asked: {body}\n"
                parts.append(entry)
                size += len(entry)
            path = log_path(root, key, day)
            path.parent.mkdir(parents=True, exist_ok=True)
            data = "".join(parts)
            path.write_text(data, encoding="utf-8")
            total += len(data.encode())
            written += 1
    (root / "MEMORY.md").write_text(
        "# Long-term memory\n- alice prefers tea\n- project budget review every friday\n",
        encoding="utf-8",
    )
    return total


def queries(rng: random.Random, n: int, vocab: list[str]) -> list[tuple[str, str]]:
    """(shape, query) pairs cycling through typical and awkward query shapes."""
    unseen = _vocabulary(random.Random(rng.random()))  # words not in the corpus: misses
    tail = vocab[len(vocab) // 2 :]  # rarer words of the corpus: specific recall
    shapes: dict[str, Callable[[], str]] = {
        "specific word": lambda: rng.choice(tail),
        "two specific words": lambda: f"{rng.choice(tail)} {rng.choice(tail)}",
        "name + topic": lambda: f"{rng.choice(NAMES)} {rng.choice(COMMON[60:])}",
        "three topic words": lambda: " ".join(rng.sample(COMMON[60:], 3)),
        "question": lambda: f"what did {rng.choice(NAMES)} say about the {rng.choice(COMMON[60:])}?",
        "unknown word": lambda: rng.choice(unseen),
        "AND miss -> OR": lambda: f"{rng.choice(tail)} {rng.choice(unseen)}",
        "very common word": lambda: rng.choice(COMMON[:10]),
        "FTS syntax": lambda: f'"{rng.choice(NAMES)}" OR deploy*',
    }
    names = list(shapes)
    return [(names[i % len(names)], shapes[names[i % len(names)]]()) for i in range(n)]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def make_engine(db: Path) -> AsyncEngine:
    try:
        from bot.storage.engine import create_engine  # production settings: WAL, busy timeout
    except ImportError:
        return create_async_engine(f"sqlite+aiosqlite:///{db}")
    return create_engine(f"sqlite+aiosqlite:///{db}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--verbose", action="store_true", help="latency per query shape")
    parser.add_argument("--postgres-url", help="run against PostgreSQL (asyncpg URL)")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="roost-bench-") as tmp:
        root = Path(tmp) / "workspace"
        t0 = time.perf_counter()
        vocab = _vocabulary(random.Random(args.seed + 1))
        size = generate(root, args.files, rng, vocab)
        gen_s = time.perf_counter() - t0
        print(f"workspace: {args.files:,} log files, {size / 1e6:.1f} MB  (generated in {gen_s:.1f} s)")

        schema = f"roost_bench_{os.getpid()}"
        if args.postgres_url:
            admin = create_async_engine(args.postgres_url)
            async with admin.begin() as conn:
                await conn.execute(text(f"CREATE SCHEMA {schema}"))
            engine = create_async_engine(
                args.postgres_url, connect_args={"server_settings": {"search_path": schema}}
            )
        else:
            engine = make_engine(Path(tmp) / "roost.db")
        print(f"database: {engine.dialect.name}")
        async with engine.begin() as conn:
            await conn.run_sync(create_memory_tables)
        index = MemoryIndex(engine, root, today=lambda: date(2025, 6, 30))
        t0 = time.perf_counter()
        stats = await index.sync()
        build_s = time.perf_counter() - t0
        db_mb = sum(p.stat().st_size for p in Path(tmp).glob("roost.db*")) / 1e6
        print(f"index build: {stats.indexed:,} files, {stats.chunks:,} chunks in {build_s:.1f} s"
              + (f"; database {db_mb:.0f} MB" if db_mb else ""))

        t0 = time.perf_counter()
        again = await index.sync()
        print(f"no-change sync (stat every file): {(time.perf_counter() - t0) * 1000:.0f} ms, "
              f"{again.unchanged:,} unchanged")

        pairs = queries(rng, args.queries, vocab)
        qs = [q for _, q in pairs]
        scopes = [("main", Scope.MAIN), ("group:telegram:-1003", Scope.SUB)]
        for q in qs[:10]:  # warm the page cache
            await index.search(q, "main", Scope.MAIN)
        for key, scope in scopes:
            lat: list[float] = []
            by_shape: dict[str, list[float]] = {}
            hits = 0
            for shape, q in pairs:
                t0 = time.perf_counter()
                result = await index.search(q, key, scope, limit=8)
                ms = (time.perf_counter() - t0) * 1000
                lat.append(ms)
                by_shape.setdefault(shape, []).append(ms)
                hits += bool(result)
            print(f"search [{scope.value} {key}] {len(qs)} queries, {hits} with hits: "
                  f"p50 {statistics.median(lat):.2f} ms  p95 {pct(lat, 95):.2f} ms  "
                  f"p99 {pct(lat, 99):.2f} ms  max {max(lat):.2f} ms")
            if args.verbose:
                for shape, values in by_shape.items():
                    print(f"    {shape:20} p50 {statistics.median(values):6.2f}  "
                          f"max {max(values):6.2f} ms")

        memory = ScopedMemory(index, root, "main", Scope.MAIN)
        lat = []
        for q in qs:
            t0 = time.perf_counter()
            await memory.search(q)
            lat.append((time.perf_counter() - t0) * 1000)
        print(f"ScopedMemory.search (refresh throttled): p50 {statistics.median(lat):.2f} ms  "
              f"p95 {pct(lat, 95):.2f} ms")
        await engine.dispose()
        if args.postgres_url:
            async with admin.begin() as conn:
                await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            await admin.dispose()


if __name__ == "__main__":
    asyncio.run(main())
