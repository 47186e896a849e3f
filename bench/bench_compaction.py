"""Context compaction on a recorded long session: tokens sent before and after.

Run: .venv/bin/python bench/bench_compaction.py [--turns 70] [--keep 20000] [--window 200000]

The whole app (bot.app.build, real SQLite storage, loop, anthropic SDK) talks to the fake
Messages API. A long coding session is recorded into the main session programmatically
(deterministic: requests, exec / read_file calls with results of 0.5–6k characters, answers);
then one message arrives with compaction due. The fake model answers the silent memory flush
and writes the summary; the summary is scripted from the session's own turns at a realistic
length (one bullet per completed action, decisions, state) — the figure measures the
mechanism, not a model's summarising skill. Printed: the estimated context (chars/4 of what
is sent: system, tools, messages) before compaction (the whole conversation), what windowing
alone would send, and what is sent after compaction; the seed's target is 40–60 % fewer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.compaction import SECTIONS, CompactionConfig  # noqa: E402
from tests.app_harness import OWNER_ID, running_app  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools  # noqa: E402
from tests.fakes.recording_adapter import private  # noqa: E402

FILES = ["bot/app.py", "agent_core/loop.py", "tests/test_loop.py", "README.md", "pyproject.toml", "docs/api.md"]
WORDS = "the handler retries with backoff while the queue drains and the cache keeps the prefix stable".split()


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def session(turns: int, seed: int = 7) -> tuple[list[tuple[str, list[dict[str, Any]]]], list[str]]:
    """(role, content) rows of a long session, and one line per completed action."""
    rng = random.Random(seed)
    rows: list[tuple[str, list[dict[str, Any]]]] = []
    actions: list[str] = []
    for i in range(turns):
        path = rng.choice(FILES)
        rows.append(("user", [{"type": "text", "text": f"Step {i}: look at {path} and " + prose(rng, rng.randint(80, 400))}]))
        calls = rng.randint(1, 3)
        for c in range(calls):
            tool, arg = (("exec", {"command": f"pytest -q tests -k case{i}_{c}"}) if c % 2 else ("read_file", {"path": path}))
            tid = f"toolu_bench_{i}_{c}"
            rows.append(("assistant", [{"type": "text", "text": prose(rng, 60)}, {"type": "tool_use", "id": tid, "name": tool, "input": arg}]))
            output = "\n".join(f"{n:4} {prose(rng, 70)}" for n in range(rng.randint(8, 80)))
            rows.append(("user", [{"type": "tool_result", "tool_use_id": tid, "content": output}]))
        rows.append(("assistant", [{"type": "text", "text": f"Done with step {i}. " + prose(rng, rng.randint(300, 1200))}]))
        actions.append(f"- step {i}: checked {path}, ran {calls} tool call(s); result ok")
    return rows, actions


def scripted_summary(actions: list[str]) -> str:
    body = {
        "Active task": ["- continue the refactor with the next step"],
        "Goal": ["- refactor the loop and keep every test green"],
        "Constraints": ["- no new dependencies", "- keep the cached prefix byte-stable"],
        "Completed actions": actions,
        "Active state": ["- branch refactor-loop; files touched: " + ", ".join(FILES)],
        "In progress": ["- the newest steps (kept verbatim)"],
        "Blocked": ["- none"],
        "Key decisions": ["- retries with backoff in the handler (fewer duplicate sends)"],
        "Resolved questions": ["- the flaky test was a timing race; fixed with an event"],
    }
    return "\n".join(f"## {s}\n" + "\n".join(body[s]) for s in SECTIONS)


def tokens(request_json: dict[str, Any]) -> int:
    parts = (request_json.get("system"), request_json.get("tools"), request_json["messages"])
    return sum(len(json.dumps(p, ensure_ascii=False)) for p in parts) // 4


async def main(args: argparse.Namespace) -> None:
    rows, actions = session(args.turns)
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
        async with running_app(Path(tmp), fake) as (app, adapter):
            for role, content in rows:
                await app.storage.append_message("main", None, role, content)
            compactor = app.agent.compactor
            assert compactor is not None
            # 1) Compaction off: what windowing alone sends.
            compactor.config = CompactionConfig(context_window_tokens=10**9, before_window=False)
            fake.script(reply_text("ok"))
            await adapter.say(private(OWNER_ID, "first, just say ok"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=60)
            await app.conversations.lanes.drain()
            windowed = tokens(fake.requests[-1].json)
            # 2) Compaction due: flush, summary, answer.
            compactor.config = CompactionConfig(
                context_window_tokens=args.window, keep_recent_tokens=args.keep, timeout_s=120
            )
            n = len(fake.requests)
            fake.script(
                reply_tools(ToolUse("memory_write", {"target": "memory", "mode": "append", "text": "Refactor: keep the prefix byte-stable."})),
                reply_text("saved"),
                reply_text(scripted_summary(actions)),
                reply_text("Continuing with the next step."),
            )
            await adapter.say(private(OWNER_ID, "go on with the next step"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2, timeout=120)
            await app.conversations.lanes.drain()
            after = tokens(fake.requests[n + 3].json)
            latest, _ = await app.storage.compaction_state("main")
            assert latest is not None and latest.ok, "compaction did not happen"
            stored = len(await app.storage.load_transcript("main"))
    before = latest.tokens_before
    print(f"recorded session: {args.turns} turns, {len(rows)} messages ({stored} stored after the bench, none dropped)")
    print(f"before compaction (whole conversation):  ≈ {before:,} tokens")
    print(f"windowing alone sends:                   ≈ {windowed:,} tokens (older turns silently left out)")
    print(f"after compaction (summary + newest ~{args.keep:,} tokens verbatim): ≈ {after:,} tokens "
          f"(record: {latest.tokens_after:,})")
    print(f"reduction: {100 * (before - after) / before:.1f} % fewer tokens (seed target 40–60 %)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=70)
    parser.add_argument("--keep", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=200_000)
    asyncio.run(main(parser.parse_args()))
