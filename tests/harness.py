"""A core harness: the real agent loop, the real anthropic SDK talking HTTP to the strict fake
Messages API, real SQLite storage and a real workspace — and a few test tools."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_core.approvals import ApprovalGate
from agent_core.events import Event
from agent_core.anthropic_llm import AnthropicLLM
from agent_core.loop import AgentLoop, LoopConfig, RunRequest
from agent_core.risk import Risk, Scope
from agent_core.tool_runner import ToolRunner
from agent_core.tools import Tool, ToolContext, ToolError, ToolRegistry
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from workspace.bootstrap import ensure_workspace
from workspace.context import build_context

OWNER = "telegram:1"


class SleepInput(BaseModel):
    seconds: float


class TextInput(BaseModel):
    text: str = ""


class CountInput(BaseModel):
    count: int


async def _sleep(args: SleepInput, ctx: ToolContext) -> str:
    await asyncio.sleep(args.seconds)  # timing-ok: the tool's own work, not a wait for a race
    return f"slept {args.seconds}"


async def _boom(args: TextInput, ctx: ToolContext) -> str:
    raise RuntimeError("kaboom")


async def _refuse(args: TextInput, ctx: ToolContext) -> str:
    raise ToolError(f"cannot do {args.text!r}")


async def _big(args: CountInput, ctx: ToolContext) -> str:
    return "".join(f"line {i}\n" for i in range(args.count))


async def _binary(args: TextInput, ctx: ToolContext) -> str:
    # What reading a binary file gives: a NUL, which PostgreSQL refuses in text and JSON.
    return f"head\x00{args.text}\x00tail"


def test_tools(executed: list[str]) -> list[Tool]:
    async def danger(args: TextInput, ctx: ToolContext) -> str:
        executed.append(args.text)
        return f"did {args.text}"

    return [
        Tool("sleep", "Sleep for some seconds.", SleepInput, Risk.READ, _sleep),
        Tool("slow", "Sleeps longer than its timeout.", SleepInput, Risk.READ, _sleep, timeout_s=0.3),
        Tool("boom", "Always raises.", TextInput, Risk.READ, _boom),
        Tool("refuse", "Reports a tool error.", TextInput, Risk.READ, _refuse),
        Tool("big", "Prints many lines.", CountInput, Risk.READ, _big),
        Tool("binary", "Prints bytes that include NUL.", TextInput, Risk.READ, _binary),
        Tool("danger", "A risky action.", TextInput, Risk.EXEC, danger, describe_action=lambda a: f"danger {a.text}"),
        Tool("note", "Writes a note.", TextInput, Risk.WRITE, danger),
    ]


@dataclass
class CoreHarness:
    fake: FakeAnthropic
    storage: Storage
    root: Path
    gate: ApprovalGate
    loop: AgentLoop
    llm: AnthropicLLM
    executed: list[str] = field(default_factory=list)

    async def run(
        self,
        text: str,
        *,
        session_key: str = "main",
        scope: Scope = Scope.MAIN,
        on_event: Callable[[Event], Awaitable[None]] | None = None,
    ) -> list[Event]:
        events: list[Event] = []
        request = RunRequest(session_key, scope, [{"type": "text", "text": text}])
        async for event in self.loop.run(request):
            events.append(event)
            if on_event is not None:
                await on_event(event)
        return events


async def make_harness(
    fake: FakeAnthropic,
    tmp_path: Path,
    *,
    config: LoopConfig = LoopConfig(model="claude-test"),
    approval_ttl_s: float = 60.0,
    now: Callable[[], datetime] | None = None,
    db_url: str | None = None,
    wrap_store: Callable[[Storage], Any] | None = None,
) -> CoreHarness:
    """`db_url`: an empty database to use (default: a fresh SQLite file under tmp_path).
    `wrap_store`: what the loop and the tool runner write through, given the real storage
    (e.g. one that stops writing after N writes, as a crash would)."""
    root = tmp_path / "workspace"
    ensure_workspace(root)
    storage = await Storage.open(db_url or f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    executed: list[str] = []
    registry = ToolRegistry(test_tools(executed))
    gate = ApprovalGate(storage, approvers=[OWNER], ttl_s=approval_ttl_s)
    store = wrap_store(storage) if wrap_store else storage
    runner = ToolRunner(registry, gate, store, default_timeout_s=5.0)
    llm = AnthropicLLM(api_key="test-key", base_url=fake.base_url, max_retries=0)
    kwargs = {"now": now} if now else {}
    loop = AgentLoop(
        llm=llm,
        tools=registry,
        runner=runner,
        store=store,
        context=lambda key, scope, at: build_context(root, key, scope, at),
        tool_context=lambda req: ToolContext(req.session_key, req.scope, root, req.run_id),
        config=config,
        **kwargs,
    )
    return CoreHarness(fake, storage, root, gate, loop, llm, executed)
