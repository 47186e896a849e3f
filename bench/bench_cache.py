"""Prompt-cache hit ratio of a multi-turn session, with the fake Messages API's cache simulation.

Run: .venv/bin/python bench/bench_cache.py [--messages 30] [--tool-every 4] [--minutes-between 2]
     [--layout system|tail|both] [--whole-log] [--no-log-growth] [--thinking off|on|both]

The whole app (bot.app.build, real storage, loop and anthropic SDK) talks to the fake, which
simulates prompt caching like the service (tests/fakes/anthropic_usage.py: a request reads
the longest earlier-written prefix ending at or up to 20 blocks before one of its
breakpoints). One main session gets `--messages` messages in a row; every `--tool-every`-th
asks for a tool call, so some runs have two model calls. Printed: the share of prompt tokens
read from cache over every request after the first (the seed's target is ≥ 95 %), per run
kind, the worst request, and what /usage shows for the session.

Layouts: `tail` (the default since LoopConfig.volatile_in_tail is on) sends the clock, today's
log and the pinned goal after the conversation's cache breakpoint; `system` is the earlier
layout (before the conversation). `--thinking on` turns ROOST_AGENT__THINKING=adaptive on and
every answer starts with a signed thinking block, which later requests send back unchanged.
`--whole-log` shows the whole of today's log on every
request, as before workspace.context.LogCutoffs (the log as of the conversation's start).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.usage_report import ratio  # noqa: E402
from tests.app_harness import OWNER_ID, running_app  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402
from tests.fakes.anthropic_script import Reply, Text, Thinking, ToolUse, last_user_text, user_texts  # noqa: E402
from tests.fakes.anthropic_usage import PromptCache  # noqa: E402
from tests.fakes.recording_adapter import private  # noqa: E402

ANSWER = (
    "Here is a considered answer with enough words to look like a real reply: it restates "
    "the question, gives two options with their trade-offs and ends with a recommendation. "
)


def question(body: dict[str, Any]) -> str:
    """The user's newest text (the tail of Roost's context is not the user's)."""
    texts = user_texts(body)
    return texts[-1] if texts else last_user_text(body)


REASONING = "The user asks something routine; weigh the two options and recommend one. " * 4


def responder(tool_every: int, thinking: bool = False) -> Any:
    def answer(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"]
        asked = question(body)
        thought = (Thinking(REASONING),) if thinking else ()
        if tool_every and asked.startswith("tool ") and not any(b.get("type") == "tool_result" for b in last):
            return Reply(*thought, Text("Let me look that up. "), ToolUse("read_file", {"path": "AGENTS.md"}))
        return Reply(*thought, Text(ANSWER * 3 + f"({asked})"))

    return answer


async def session(args: argparse.Namespace, tail: bool, thinking: bool = False) -> tuple[list[dict[str, Any]], str]:
    messages, tool_every = args.messages, args.tool_every
    agent = {"thinking": "adaptive", "models": {"claude-test": {"thinking": True}}} if thinking else {}
    with FakeAnthropic() as fake, tempfile.TemporaryDirectory() as tmp:
        fake.responder = responder(tool_every, thinking)
        async with running_app(Path(tmp), fake, agent=agent) as (app, adapter):  # the owner: no [limits]
            app.agent.config = dataclasses.replace(app.agent.config, volatile_in_tail=tail)
            # The prompt's clock, moved on between messages as a person's pace would.
            start = datetime.now(UTC).replace(hour=9, minute=0)
            clock = [start]
            app.agent._now = lambda: clock[0]  # the loop's injected clock (context's "now")
            app.conversations._now = lambda: clock[0]  # stamps today's log entries
            if args.whole_log and app.conversations.log_cutoffs is not None:
                app.conversations.log_cutoffs.cutoff = lambda key, now: None  # type: ignore[method-assign,assignment]
            for i in range(messages):
                clock[0] = start + timedelta(minutes=args.minutes_between * i)
                text = f"tool question {i}" if tool_every and i % tool_every == tool_every - 1 else f"question {i}"
                await adapter.say(private(OWNER_ID, text))
                await adapter.wait_for(lambda n=i: len(adapter.closed_replies()) == n + 1, timeout=30)
                await app.conversations.lanes.drain()
                if args.no_log_growth:  # measure without today's log re-sent each run
                    shutil.rmtree(app.settings.workspace_dir / "memory", ignore_errors=True)
            await app.conversations.metrics.settle()
            usage = await app.conversations.commands.run(
                *_usage_command(), private(OWNER_ID, "/usage"), _owner_route()
            )
        return [r.json for r in fake.requests if r.json is not None], usage


def _usage_command() -> tuple[Any]:
    from bot.commands import Command

    return (Command("usage", ""),)


def _owner_route() -> Any:
    from agent_core.risk import Scope
    from bot.router import Accept

    return Accept("main", Scope.MAIN, True)


def measure(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Replays the bodies through the same cache simulation the fake used (in order)."""
    cache = PromptCache()
    rows = []
    for body in bodies:
        u = cache.account(body)
        total = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
        rows.append((u, total))
    after_first = rows[1:]
    read = sum(u.cache_read_input_tokens for u, _ in after_first)
    total = sum(t for _, t in after_first)
    worst = min(range(1, len(rows)), key=lambda i: rows[i][0].cache_read_input_tokens / rows[i][1])
    # A run's first request (its user message is new) vs. a request after tool results.
    first_calls = [r for b, r in zip(bodies[1:], after_first, strict=True)
                   if not any(x.get("type") == "tool_result" for x in b["messages"][-1]["content"])]  # fmt: skip
    after_tools = [r for r in after_first if r not in first_calls]

    def share(group: list[tuple[Any, int]]) -> str:
        t = sum(x for _, x in group)
        return f"{sum(u.cache_read_input_tokens for u, _ in group) / t:.1%}" if t else "–"

    return {
        "requests": len(rows),
        "ratio": read / total if total else 0.0,
        "first_of_run": share(first_calls),
        "after_tools": share(after_tools),
        "worst": (worst + 1, rows[worst][0], rows[worst][1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=30)
    parser.add_argument("--tool-every", type=int, default=4)
    parser.add_argument("--layout", choices=["system", "tail", "both"], default="both",
                        help="volatile context in the system (today's default) or after the history")
    parser.add_argument("--minutes-between", type=int, default=2, help="the prompt clock's step per message")
    parser.add_argument("--whole-log", action="store_true", help="the whole of today's log on every request")
    parser.add_argument("--no-log-growth", action="store_true", help="drop today's log after each run")
    parser.add_argument("--thinking", choices=["off", "on", "both"], default="off",
                        help="ROOST_AGENT__THINKING=adaptive, every answer with a thinking block")
    args = parser.parse_args()
    for thinking in (False, True) if args.thinking == "both" else (args.thinking == "on",):
        for layout in ("system", "tail") if args.layout == "both" else (args.layout,):
            report(args, layout, thinking)


def report(args: argparse.Namespace, layout: str, thinking: bool = False) -> None:
    bodies, usage = asyncio.run(session(args, layout == "tail", thinking))
    assert not thinking or all(b.get("thinking") for b in bodies), "thinking on: every request sends it"
    m = measure(bodies)
    worst_n, worst_u, worst_total = m["worst"]
    log = "dropped after each run" if args.no_log_growth else "growing, sent whole" if args.whole_log else (
        "growing, sent as of the conversation's start")
    print(f"thinking {'on' if thinking else 'off'}, layout {layout}: {args.messages} messages {args.minutes_between} min apart, today's log {log}, "
          f"{m['requests']} model requests")
    print(f"cache hit ratio after the first request: {m['ratio']:.1%} (target ≥ 95 %)")
    print(f"  first request of a run: {m['first_of_run']}; after tool results: {m['after_tools']}")
    print(f"  worst: request {worst_n}: {worst_u.cache_read_input_tokens:,} of {worst_total:,} tokens read")
    today = next((line for line in usage.splitlines() if line.startswith("Today, total")), "")
    print(f"/usage: {today[:60]}… cache hit {today.split('cache hit ')[1].split(';')[0] if today else '–'}")
    _ = ratio  # the same formatting /usage uses


if __name__ == "__main__":
    main()
