"""Workers (orchestrator–worker): a run hands an independent sub-task to a worker run with its
own isolated context (the task text and what the parent passes, nothing else), the parent's
tools minus the structural ones (no spawn: depth 1), decided by the same policy as the parent
(same scope and session: never more rights), its own turn budget and timeout. Its spend
counts against the parent's chat and requester (`RunRequest.account`); the between-turns
budget check (`between_turns`) stops it like any run, and a worker stopped by it ends its
parent after that turn too.

Every worker is a task owned by the pool; a parent's workers are cancelled when the parent
ends (`cancel_run`, e.g. on /stop), and each ends with an honest status: completed, failed,
timed_out, budget_exceeded or cancelled (interrupted after a restart, by the storage).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from agent_core.events import ApprovalRequested, ApprovalResolved, RunFailed, RunFinished, WorkersChanged
from agent_core.loop import AgentLoop, BetweenTurns, LoopConfig, RunRequest
from agent_core.llm import LLMClient
from agent_core.ports import AgentStore
from agent_core.tool_runner import ToolRunner
from agent_core.tools import RunEnd, Tool, ToolContext, ToolError, ToolRegistry

log = logging.getLogger(__name__)

WorkerStatus = Literal["running", "completed", "failed", "timed_out", "budget_exceeded", "cancelled", "interrupted"]
PARENT_ONLY_TOOLS = frozenset({"spawn", "ask_user", "plan", "send_message", "send_file", "schedule"})
"""Tools a worker never gets: it cannot spawn (depth 1), talk to the chat or change plans."""


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    max_children: int = 5
    """Workers one run may spawn."""
    max_running: int = 8
    """Workers running at once in the process."""
    max_turns: int = 6
    timeout_s: float = 300.0


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: str
    parent_run_id: str
    session_key: str
    name: str
    task: str
    status: WorkerStatus = "running"
    result: str | None = None
    started_at: datetime = datetime.min.replace(tzinfo=UTC)
    finished_at: datetime | None = None


class WorkerStore(Protocol):
    async def add_worker(self, record: WorkerRecord) -> None: ...

    async def finish_worker(self, worker_id: str, status: WorkerStatus, result: str) -> None: ...


@dataclass(slots=True)
class _Worker:
    record: WorkerRecord
    task: asyncio.Task[tuple[WorkerStatus, str]] | None = None
    collected: bool = False


@dataclass(slots=True)
class _Family:
    workers: dict[str, _Worker] = field(default_factory=dict)
    done: int = 0
    """Workers that recorded their status (shown as finished)."""


_NO_CONTEXT = type("_NoContext", (), {"stable": "", "volatile": ""})()

RunnerFactory = Callable[[ToolRegistry], ToolRunner]


class WorkerPool:
    """See the module docstring. One per process; `aclose` cancels whatever still runs."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        tools: ToolRegistry,
        runner: RunnerFactory,
        store: Any,
        config: LoopConfig,
        limits: WorkerLimits | Callable[[], WorkerLimits] = WorkerLimits(),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        between_turns: BetweenTurns | None = None,
    ) -> None:
        self._between_turns = between_turns
        self._llm = llm
        self._tools = tools
        self._runner = runner
        self._store: AgentStore = store
        self._workers_store: WorkerStore = store
        self._config = config
        self._limits = limits if callable(limits) else (lambda: limits)
        self._now = now
        self._families: dict[str, _Family] = {}
        self._running = 0

    @property
    def running(self) -> int:
        return self._running

    def has_running(self, run_id: str) -> bool:
        """Whether `run_id` has a worker still running (it may write files at any moment)."""
        family = self._families.get(run_id)
        return family is not None and any(w.task is not None and not w.task.done() for w in family.workers.values())

    def start(self, ctx: ToolContext, name: str, task: str, context: str = "",
              tools: Iterable[str] | None = None, max_turns: int | None = None,
              timeout_s: float | None = None) -> WorkerRecord:  # fmt: skip
        """Start a worker for the run in `ctx`; raises ToolError when a limit refuses it."""
        limits = self._limits()
        family = self._families.setdefault(ctx.run_id, _Family())
        if len(family.workers) >= limits.max_children:
            raise ToolError(f"Not started: a run may spawn at most {limits.max_children} workers.")
        if self._running >= limits.max_running:
            raise ToolError(f"Not started: {limits.max_running} workers are already running; wait for some.")
        record = WorkerRecord(uuid.uuid4().hex, ctx.run_id, ctx.session_key, name.strip()[:120] or "worker",
                              task.strip(), started_at=self._now())  # fmt: skip
        worker = _Worker(record)
        family.workers[record.id] = worker
        turns = min(max_turns or limits.max_turns, limits.max_turns)
        timeout = min(timeout_s or limits.timeout_s, limits.timeout_s)
        self._running += 1
        worker.task = asyncio.create_task(
            self._run(worker, family, ctx, context, tools, turns, timeout), name=f"worker:{record.id}"
        )  # owned here: awaited by wait(), cancelled by cancel_run() / aclose()
        # Counted down when the task ends, however it ends (even cancelled before it ran).
        worker.task.add_done_callback(lambda _t: self._ended())
        return record

    def _ended(self) -> None:
        self._running -= 1

    async def wait(self, ctx: ToolContext, ids: Iterable[str] | None = None, *, first: bool = False) -> list[WorkerRecord]:
        """Wait for the run's workers (`ids`, or every one not yet collected); their final
        records, in start order. `first`: return as soon as one has finished, with every one
        finished by then (the others keep running)."""
        family = self._families.get(ctx.run_id, _Family())
        wanted = list(ids) if ids else [i for i, w in family.workers.items() if not w.collected]
        unknown = [i for i in wanted if i not in family.workers]
        if unknown:
            raise ToolError(f"No worker {unknown[0]!r} in this run.")
        if first and wanted:
            tasks = {family.workers[i].task for i in wanted}
            # Shielded: giving up on the wait (a cancelled parent) must not cancel the workers here.
            await asyncio.wait({asyncio.ensure_future(asyncio.shield(t)) for t in tasks if t is not None},
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            wanted = [i for i in wanted if (t := family.workers[i].task) is not None and t.done()]
        out = []
        for worker_id in wanted:
            worker = family.workers[worker_id]
            assert worker.task is not None
            status, result = await asyncio.shield(worker.task)
            worker.collected = True
            out.append(dataclasses.replace(worker.record, status=status, result=result))
        return out

    async def cancel_run(self, run_id: str) -> None:
        """The parent ended (finished, failed or stopped): cancel its workers still running
        and wait until each has recorded its status."""
        family = self._families.pop(run_id, None)
        if family is None:
            return
        tasks = [w.task for w in family.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def aclose(self) -> None:
        for run_id in list(self._families):
            await self.cancel_run(run_id)

    async def _run(
        self, worker: _Worker, family: _Family, parent: ToolContext, context: str, only: Iterable[str] | None,
        max_turns: int, timeout_s: float,
    ) -> tuple[WorkerStatus, str]:  # fmt: skip
        record = worker.record
        status: WorkerStatus = "failed"
        result = "The worker ended without a result."
        await self._emit(parent, family)
        try:
            await self._workers_store.add_worker(record)
            loop = self._loop(record, parent, only, max_turns)
            text = f"{record.task}\n\n{context.strip()}" if context.strip() else record.task
            request = RunRequest(
                session_key=f"worker:{record.id}", scope=parent.scope, run_id=record.id,
                content=[{"type": "text", "text": f"{_BRIEF}\n\nTask: {text}"}], requester=parent.requester,
                account=parent.session_key,  # its spend is the chat's and the asker's, never nobody's
                scheduled=parent.scheduled,  # a job's worker meets the budget its job meets
            )  # fmt: skip
            try:
                async with asyncio.timeout(timeout_s):
                    status, result = await self._consume(loop, request, parent, max_turns)
            except TimeoutError:
                status, result = "timed_out", f"No result within {timeout_s:g} s; the worker was stopped."
        except asyncio.CancelledError:
            status, result = "cancelled", "Cancelled before it finished (the task was stopped)."
            await asyncio.shield(self._finish(record, status, result, parent, family))
            raise
        except Exception as exc:  # task boundary: the parent gets "failed", never a hang
            log.warning("worker.crashed", extra={"worker": record.id}, exc_info=True)
            status, result = "failed", f"The worker crashed ({type(exc).__name__})."
        await self._finish(record, status, result, parent, family)
        return status, result

    async def _consume(
        self, loop: AgentLoop, request: RunRequest, parent: ToolContext, max_turns: int
    ) -> tuple[WorkerStatus, str]:
        async with contextlib.aclosing(loop.run(request)) as events:
            async for event in events:
                match event:
                    case ApprovalRequested() | ApprovalResolved() if parent.emit is not None:
                        await parent.emit(event)  # the parent's chat shows the worker's card
                    case RunFinished(stop_reason=reason, text=text):
                        if reason == "spend_cap":
                            # The chat's budget is spent: the parent ends too, after this turn's
                            # results, with the same message (no further model call).
                            if parent.end is None:
                                parent.end = RunEnd("spend_cap", _last_paragraph(text))
                            return "budget_exceeded", text.strip()
                        if reason == "max_turns":
                            return "budget_exceeded", (
                                f"Used its whole budget of {max_turns} turns without finishing. "
                                f"Partial output: {text.strip() or '(none)'}"
                            )
                        if reason in ("end_turn", "stop_sequence", "max_tokens"):
                            return "completed", text.strip() or "(no text)"
                        return "failed", f"Stopped ({reason}): {text.strip()}"
                    case RunFailed(message=message):
                        return "failed", message
        return "failed", "The worker ended without a result."

    def _loop(self, record: WorkerRecord, parent: ToolContext, only: Iterable[str] | None, max_turns: int) -> AgentLoop:
        allowed = set(only) if only else None
        label = f"Worker “{record.name}” (task: {_short(record.task)})"
        tools = []
        for name in self._tools.names():
            tool = self._tools.get(name)
            if tool is None or name in PARENT_ONLY_TOOLS or (allowed is not None and name not in allowed):
                continue
            tools.append(_labelled(tool, label, parent.session_key))
        registry = ToolRegistry(tools)

        def tool_context(request: RunRequest) -> ToolContext:
            # The parent's scope and session decide every call: never more rights than it.
            # Its tool calls count against the parent run's cap.
            return dataclasses.replace(parent, run_id=request.run_id, cap_run_id=parent.cap_run_id or parent.run_id,
                                       messenger=None, emit=None, end=None)  # fmt: skip

        return AgentLoop(
            llm=self._llm, tools=registry, runner=self._runner(registry), store=self._store,
            context=lambda *_: _NO_CONTEXT, tool_context=tool_context,
            config=dataclasses.replace(self._config, max_turns=max_turns), between_turns=self._between_turns,
        )  # fmt: skip

    async def _finish(
        self, record: WorkerRecord, status: WorkerStatus, result: str, parent: ToolContext, family: _Family
    ) -> None:
        try:
            await self._workers_store.finish_worker(record.id, status, result)
        except Exception:
            log.exception("worker.finish_failed", extra={"worker": record.id})
        family.done += 1
        await self._emit(parent, family)

    @staticmethod
    async def _emit(parent: ToolContext, family: _Family) -> None:
        if parent.emit is not None:
            await parent.emit(WorkersChanged(len(family.workers) - family.done, family.done))


_BRIEF = (
    "You are a worker: do only the task below with the tools you have, then answer with the "
    "result (facts, what you checked). You cannot ask the user anything."
)


def _last_paragraph(text: str) -> str:
    return text.strip().rpartition("\n\n")[2]


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _labelled(tool: Tool[Any], label: str, parent_key: str) -> Tool[Any]:
    def describe(parsed: Any, t: Tool[Any] = tool) -> str:
        return f"{label}\n{t.action_text(parsed)}"

    offered = tool.offered_to
    if offered is not None:  # offered as to the parent's chat, whose policy decides its calls
        return dataclasses.replace(
            tool, describe_action=describe, offered_to=lambda scope, _key, f=offered: f(scope, parent_key)
        )
    return dataclasses.replace(tool, describe_action=describe)
