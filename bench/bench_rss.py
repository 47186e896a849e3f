"""Resident memory of a real `roost run` process, and where it goes.

Run: .venv/bin/python bench/bench_rss.py [--runs 3] [--breakdown] [--tracemalloc]

A `python -m bot.cli run` subprocess serves the fake Bot API (tests/fakes/telegram_api.py)
with the real anthropic SDK streaming from the fake Messages API (tests/fakes/anthropic_api.py).
The workload is the one of shared/PEERS.md's side-by-side table: 20 private pings from the
owner (each answered before the next), two ~3,000-character answers streamed over 3 s each
(the second under three injected 429s with retry_after 2 s), and a group mention by a
non-owner. The home is new, as in the side-by-side run (147 MB then, when the first start
migrated in process): `roost run` now migrates in a child `roost init` (bot/startup_migration.py)
and serves without Alembic. `--init-first` runs `roost init` before, as a bot restarted on its
own home finds it (no child needed).

Prints, per run: RSS once the process serves (the SDK loaded), and after the workload;
then the medians. `--breakdown` adds, for the last run's process: anonymous vs file-backed
memory, the mappings by kind (main heap, thread arenas, thread stacks, other anonymous
mappings, shared libraries), threads; and what importing each library costs on its own in a
fresh interpreter. `--tracemalloc` runs one more process with tracemalloc on (which itself
inflates RSS) and prints Python allocations still live after the workload, grouped by
package.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.render.chunks import ChunkSpec, plan_chunks  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import Reply, Text  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

TOKEN = "123456:BENCH-token"
OWNER = 1
STRANGER = 77
GROUP = -4_000_001
PINGS = 20
MB = 1024  # smaps figures are in kB

# tracemalloc in the child: started before anything is imported; SIGUSR1 writes the live
# allocations grouped by package to the file named in ROOST_BENCH_TRACE.
TRACED_CHILD = """
import os, signal, sys, tracemalloc
tracemalloc.start(1)

def _dump(signum, frame):
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    with open(os.environ["ROOST_BENCH_TRACE"], "w") as out:
        for stat in snapshot.statistics("filename"):
            out.write(f"{stat.size}\\t{stat.count}\\t{stat.traceback[0].filename}\\n")

signal.signal(signal.SIGUSR1, _dump)
from bot.cli import main
sys.exit(main(["run"]))
"""


# -- reading a process's memory ---------------------------------------------------------


def rollup(pid: int) -> dict[str, int]:
    """/proc/<pid>/smaps_rollup as {field: kB}."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        out[name.rstrip(":")] = int(value)
    return out


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


@dataclass
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    rss: int = 0  # kB

    @property
    def size(self) -> int:
        return (self.end - self.start) // 1024


def mappings(pid: int) -> list[Mapping]:
    maps: list[Mapping] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            maps.append(Mapping(start, end, head[1], head[5] if len(head) > 5 else ""))
        elif head[0] == "Rss:":
            maps[-1].rss = int(head[1])
    return maps


def classify(maps: list[Mapping]) -> dict[str, tuple[int, int]]:
    """RSS (kB) and count by kind. glibc's thread arenas are 64 MB reservations (a rw part
    then a PROT_NONE rest, 64 MB aligned); thread stacks are a guard page then 8 MB - 4 kB of
    rw. Everything else anonymous is the main arena's mmapped chunks and pymalloc's arenas."""
    kinds: dict[str, list[int]] = {}

    def add(kind: str, rss: int) -> None:
        entry = kinds.setdefault(kind, [0, 0])
        entry[0] += rss
        entry[1] += 1

    arena = 64 * MB
    for i, m in enumerate(maps):
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        prev = maps[i - 1] if i else None
        if m.path == "[heap]":
            add("main heap (brk)", m.rss)
        elif m.path == "[stack]":
            add("main thread stack", m.rss)
        elif m.path.startswith("["):
            add("kernel ([vdso] etc.)", m.rss)
        elif m.path:
            kind = "shared libraries (.so)" if ".so" in Path(m.path).name else "other files"
            add(kind, m.rss)
        elif m.perms.startswith("---"):
            continue  # reserved, never resident
        elif m.start % (arena * 1024) == 0 and nxt is not None and nxt.start == m.end and not nxt.path \
                and nxt.perms.startswith("---") and m.size + nxt.size == arena:
            add("thread arenas (glibc)", m.rss)
        elif m.start % (arena * 1024) == 0 and m.size == arena:
            add("thread arenas (glibc)", m.rss)
        elif prev is not None and prev.end == m.start and prev.perms.startswith("---") and not prev.path \
                and prev.size + m.size in (8 * MB, 8 * MB + 4):
            add("thread stacks", m.rss)
        else:
            add("other anonymous (pymalloc arenas, large blocks)", m.rss)
    return {k: (v[0], v[1]) for k, v in kinds.items()}


def mb(kb: int) -> str:
    return f"{kb / MB:6.1f} MB"


# -- the workload ------------------------------------------------------------------------


def prose(chars: int) -> str:
    words = "the agent **streams** answers by editing one message in place and never sends `twice`".split()
    out, n = [], 0
    while sum(len(p) + 2 for p in out) < chars:
        out.append(f"{n}: " + " ".join(words[(n + k) % len(words)] for k in range(12)).capitalize() + ".")
        n += 1
    return "\n\n".join(out)[: chars - 1].rstrip() + "."


def child_env(home: str, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_"))}
    env.update(
        ROOST_HOME=home,
        ROOST_OWNERS=f'["telegram:{OWNER}"]',
        ROOST_TELEGRAM__ALLOWED_GROUPS='["*"]',
        ROOST_LOG_LEVEL="WARNING",
        TELEGRAM_BOT_TOKEN=TOKEN,
        ROOST_TELEGRAM__BASE_URL=tg.base_url,
        ANTHROPIC_API_KEY="bench-key",
        ANTHROPIC_BASE_URL=llm.base_url,
    )
    return env


async def wait_served(process: subprocess.Popen[bytes], tg: FakeTelegram, llm: FakeAnthropic) -> None:
    """Polling, and the SDK loaded: one ping answered through the real SDK."""
    await tg.await_for(lambda: tg.is_polling or process.poll() is not None, timeout=180)
    if process.poll() is not None:
        raise RuntimeError(f"`roost run` exited with {process.returncode} before serving")
    tg.send_private(OWNER, "hello")
    await tg.await_for(lambda: len(tg.bot_messages(OWNER)) >= 1, timeout=180)


async def settle(tg: FakeTelegram, quiet_s: float = 1.5) -> None:
    """Until the bot made no Bot API call other than polling for `quiet_s` (its runs' tail
    bookkeeping done)."""
    def last_call() -> float:
        return max((c.at for c in tg.calls if c.method != "getUpdates"), default=0.0)

    while time.monotonic() - last_call() < quiet_s:
        await asyncio.sleep(0.25)  # timing-ok: polls for quiet; the figure does not depend on it


async def workload(tg: FakeTelegram, llm: FakeAnthropic) -> None:
    for i in range(PINGS):
        tg.send_private(OWNER, f"ping {i}")
        await tg.await_for(lambda i=i: any(m.text == f"echo: ping {i}" for m in tg.bot_messages(OWNER)), timeout=180)
    await settle(tg)
    answer = prose(3000)
    expected = [p.text for p in plan_chunks(answer, ChunkSpec.create(4096, "utf16", False))]
    for faults in (False, True):
        before = len(tg.bot_messages(OWNER))
        llm.script(Reply(Text(answer, chunk_size=20, delay_s=3.0 / 150)))
        if faults:
            tg.fail_next("sendMessage", status=429, retry_after=2, chat_id=OWNER)
            tg.fail_next("editMessageText", status=429, retry_after=2, count=2, chat_id=OWNER)
        tg.send_private(OWNER, "a long story please")
        try:
            await tg.await_for(
                lambda b=before: [m.text for m in tg.bot_messages(OWNER)[b:]][-len(expected):] == expected, timeout=180
            )
        except TimeoutError:
            got = [m.text for m in tg.bot_messages(OWNER)[before:]]
            raise RuntimeError(f"streamed answer (faults={faults}) ended as {got!r}"[:2000]) from None
        await settle(tg)
    tg.send_group(GROUP, STRANGER, "what do you think?", mention=True)
    await tg.await_for(lambda: len(tg.bot_messages(GROUP)) >= 1, timeout=180)
    await settle(tg)


@dataclass
class Result:
    started_kb: int
    after_kb: int
    rollup: dict[str, int]
    kinds: dict[str, tuple[int, int]]
    threads: int
    trace: list[tuple[int, int, str]] | None = None


async def one_run(fresh_home: bool, traced: bool = False) -> Result:
    with tempfile.TemporaryDirectory() as home, FakeTelegram(token=TOKEN) as tg, FakeAnthropic() as llm:
        tg.add_chat(OWNER, type="private")
        env = child_env(home, tg, llm)
        if not fresh_home:
            subprocess.run([sys.executable, "-m", "bot.cli", "init"], cwd=ROOT, env=env, check=True,
                           stdout=subprocess.DEVNULL)
        trace_file = Path(home) / "trace.tsv"
        if traced:
            env["ROOST_BENCH_TRACE"] = str(trace_file)
            cmd = [sys.executable, "-c", TRACED_CHILD]
        else:
            cmd = [sys.executable, "-m", "bot.cli", "run"]
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            await wait_served(process, tg, llm)
            await settle(tg)
            started = rollup(process.pid)["Rss"]
            await workload(tg, llm)
            after = rollup(process.pid)
            result = Result(started, after["Rss"], after, classify(mappings(process.pid)), threads(process.pid))
            if traced:
                process.send_signal(signal.SIGUSR1)
                deadline = time.monotonic() + 180
                while not trace_file.exists() or not trace_file.read_text().endswith("\n"):
                    if time.monotonic() > deadline:
                        raise TimeoutError("no tracemalloc dump")
                    await asyncio.sleep(0.2)  # timing-ok: waits for the child's dump file
                await asyncio.sleep(0.5)  # timing-ok: the dump is written in one go; let it finish
                result.trace = [
                    (int(size), int(count), path)
                    for size, count, path in (line.split("\t") for line in trace_file.read_text().splitlines())
                ]
            return result
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                _, err = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
            if process.returncode not in (0, -signal.SIGTERM) and err:
                print(err.decode(errors="replace")[-2000:], file=sys.stderr)


# -- import costs ------------------------------------------------------------------------

IMPORT_SETS = [
    ("python alone", []),
    ("pydantic + pydantic-settings", ["pydantic", "pydantic_settings"]),
    ("SQLAlchemy (asyncio) + aiosqlite", ["sqlalchemy", "sqlalchemy.ext.asyncio", "aiosqlite"]),
    ("python-telegram-bot (+ext)", ["telegram", "telegram.ext"]),
    ("anthropic SDK", ["anthropic"]),
    ("the four mandated libraries", ["pydantic", "pydantic_settings", "sqlalchemy", "sqlalchemy.ext.asyncio",
                                     "aiosqlite", "telegram", "telegram.ext", "anthropic"]),
    ("bot.cli's `run` imports (Roost + all libraries)", ["bot.cli", "bot.logs", "bot.platforms", "bot.app",
                                                         "adapters.telegram", "agent_core.anthropic_llm"]),
]

IMPORT_PROBE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
fields = dict(line.split()[:2] for line in open("/proc/self/smaps_rollup").read().splitlines()[1:])
print(fields["Rss:"], fields["Anonymous:"], len(sys.modules))
"""


def import_cost(modules: list[str]) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE, *modules], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1]), int(out[2])


# -- report --------------------------------------------------------------------------------


def package_of(path: str) -> str:
    marker = "site-packages/"
    if marker in path:
        return path.split(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    if path.startswith(str(ROOT)):
        return "roost: " + path[len(str(ROOT)) + 1:].split("/", 1)[0]
    if path.startswith("<"):
        return path
    return "stdlib: " + Path(path).stem if "/lib/python" in path else path


def print_breakdown(result: Result) -> None:
    r = result.rollup
    print("  breakdown of the last run's process after the workload:")
    print(f"    Rss {mb(r['Rss'])}: anonymous {mb(r['Anonymous'])}, file-backed "
          f"{mb(r['Rss'] - r['Anonymous'] - r.get('Shmem', 0))}, shmem {mb(r.get('Shmem', 0))}; threads {result.threads}")
    for kind, (kb, n) in sorted(result.kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"    {kind:<50} {mb(kb)}  ({n} mappings)")
    print("  importing, each in a fresh interpreter (RSS / anonymous / modules):")
    for label, modules in IMPORT_SETS:
        rss, anon, count = import_cost(modules)
        print(f"    {label:<50} {mb(rss)} / {mb(anon)} / {count}")


def print_trace(result: Result) -> None:
    assert result.trace is not None
    by_package: dict[str, list[int]] = {}
    for size, count, path in result.trace:
        entry = by_package.setdefault(package_of(path), [0, 0])
        entry[0] += size
        entry[1] += count
    total = sum(v[0] for v in by_package.values())
    print(f"  tracemalloc: Python allocations live after the workload, {total / 2**20:.1f} MB in all"
          f" (RSS of that process {mb(result.after_kb)}; tracemalloc's own cost included there):")
    for package, (size, count) in sorted(by_package.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"    {package:<50} {size / 2**20:6.1f} MB  ({count} blocks)")


async def main(runs: int, fresh_home: bool, breakdown: bool, traced: bool) -> None:
    results = []
    for i in range(runs):
        result = await one_run(fresh_home)
        results.append(result)
        print(f"run {i + 1}: RSS serving {mb(result.started_kb)}, after the workload {mb(result.after_kb)}"
              f" (anonymous {mb(result.rollup['Anonymous'])}, threads {result.threads})", flush=True)
    print(f"median over {runs}: serving {mb(int(statistics.median(r.started_kb for r in results)))},"
          f" after the workload {mb(int(statistics.median(r.after_kb for r in results)))}  (target ≤ 130 MB)")
    if breakdown:
        print_breakdown(results[-1])
    if traced:
        print_trace(await one_run(fresh_home, traced=True))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--init-first", action="store_true", help="`roost init` first: no migrations in `run`")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.runs, not args.init_first, args.breakdown, args.tracemalloc))
