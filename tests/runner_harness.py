"""The real ToolRunner, ApprovalGate and SQLite storage with recording tools, one call at a
time: for policy, grant and audit tests that need no model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_core.approvals import ApprovalGate, Decision
from agent_core.builtin_tools.exec_tool import ExecInput
from agent_core.events import ApprovalRequested, Event
from agent_core.policy import Policy
from agent_core.ports import AuditEntry
from agent_core.risk import Risk, Scope
from agent_core.tool_runner import CallCap, PolicySource, ToolCall, ToolOutcome, ToolRunner
from agent_core.tools import Tool, ToolContext, ToolRegistry
from bot.storage import Storage

OWNER = "telegram:1"


class FakeAudit:
    """An in-memory AuditSink."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    async def audit(self, entry: AuditEntry) -> None:
        self.entries.append(entry)


class TextIn(BaseModel):
    text: str = ""


class UrlIn(BaseModel):
    url: str


class PathIn(BaseModel):
    path: str


@dataclass
class RunnerHarness:
    storage: Storage
    gate: ApprovalGate
    runner: ToolRunner
    workspace: Path
    audit: FakeAudit
    executed: list[tuple[str, str]]
    file_text: dict[str, str] = field(default_factory=dict)
    """What the fake read_file returns per path."""
    asked: list[ApprovalRequested] = field(default_factory=list)
    decision: Decision = Decision.DENY
    """How the approver answers every card (pressed at once, by OWNER)."""
    calls: int = 0
    runs: set[str] = field(default_factory=set)

    async def call(
        self,
        name: str,
        input: dict[str, Any],
        *,
        session_key: str = "main",
        scope: Scope = Scope.MAIN,
        requester: str = OWNER,
        run_id: str | None = None,
    ) -> ToolOutcome:
        self.calls += 1
        run_id = run_id or f"run:{session_key}"
        if run_id not in self.runs:  # tool calls reference their run
            self.runs.add(run_id)
            await self.storage.ensure_session(session_key, "main" if scope is Scope.MAIN else "sub")
            await self.storage.start_run(run_id, session_key, "test")
        ctx = ToolContext(session_key, scope, self.workspace, run_id=run_id, requester=requester)

        async def emit(event: Event) -> None:
            if isinstance(event, ApprovalRequested):
                self.asked.append(event)
                await self.gate.resolve(event.approval_id, self.decision, OWNER)

        [outcome] = await self.runner.run_all([ToolCall(f"call{self.calls}", name, input)], ctx, set(), emit)
        return outcome

    async def call_all(self, calls: list[tuple[str, dict[str, Any]]]) -> list[ToolOutcome]:
        """Several calls of one model message in main (they run concurrently)."""
        self.calls += 1  # the run row and session exist after a first `call`
        ctx = ToolContext("main", Scope.MAIN, self.workspace, run_id="run:main", requester=OWNER)

        async def emit(event: Event) -> None:
            if isinstance(event, ApprovalRequested):
                self.asked.append(event)
                await self.gate.resolve(event.approval_id, self.decision, OWNER)

        batch = [ToolCall(f"call{self.calls}-{i}", name, input) for i, (name, input) in enumerate(calls)]
        return await self.runner.run_all(batch, ctx, set(), emit)

    def ran(self, name: str) -> list[str]:
        return [text for tool, text in self.executed if tool == name]


def recording_tools(executed: list[tuple[str, str]], files: dict[str, str], workspace: Path) -> list[Tool[Any]]:
    def record(name: str, value: str) -> str:
        executed.append((name, value))
        return f"{name} did {value}"

    async def reader(args: TextIn, ctx: ToolContext) -> str:
        return record("reader", args.text)

    async def writer(args: TextIn, ctx: ToolContext) -> str:
        return record("writer", args.text)

    async def exec_(args: ExecInput, ctx: ToolContext) -> str:
        return record("exec", args.command)

    async def web_fetch(args: UrlIn, ctx: ToolContext) -> str:
        return record("web_fetch", args.url)

    async def read_file(args: PathIn, ctx: ToolContext) -> str:
        record("read_file", args.path)
        return files.get(args.path, "")

    async def crash(args: PathIn, ctx: ToolContext) -> str:
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{workspace / args.path}'")

    return [
        Tool("reader", "Reads.", TextIn, Risk.READ, reader),
        Tool("writer", "Writes.", TextIn, Risk.WRITE, writer, describe_action=lambda a: f"write {a.text}"),
        Tool("exec", "Runs a command.", ExecInput, Risk.EXEC, exec_, describe_action=lambda a: a.command),
        Tool("web_fetch", "Fetches.", UrlIn, Risk.READ, web_fetch),
        Tool("read_file", "Reads a file.", PathIn, Risk.READ, read_file),
        Tool("crash", "Fails with a path.", PathIn, Risk.READ, crash),
    ]


async def make_runner(
    tmp_path: Path,
    *,
    policy: Policy | PolicySource = Policy(),
    call_cap: CallCap | int = 0,
    storage: Storage | None = None,
) -> RunnerHarness:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    if storage is None:
        storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    executed: list[tuple[str, str]] = []
    files: dict[str, str] = {}
    registry = ToolRegistry(recording_tools(executed, files, workspace))
    gate = ApprovalGate(storage, approvers=[OWNER])
    audit = FakeAudit()
    runner = ToolRunner(registry, gate, storage, policy=policy, audit=audit, call_cap=call_cap, default_timeout_s=5.0)
    return RunnerHarness(storage, gate, runner, workspace, audit, executed, files)


@contextlib.asynccontextmanager
async def runner_harness(tmp_path: Path, **kwargs: Any) -> AsyncIterator[RunnerHarness]:
    harness = await make_runner(tmp_path, **kwargs)
    try:
        yield harness
    finally:
        await harness.storage.aclose()
