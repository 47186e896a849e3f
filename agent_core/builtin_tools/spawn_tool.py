"""The `spawn` tool: hand an independent sub-task to a worker, then wait for results."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError
from agent_core.workers import WorkerPool, WorkerRecord

WAIT_S = 3600.0
"""The tool's own timeout; each worker's timeout is shorter and ends it honestly first."""


class SpawnInput(BaseModel):
    action: Literal["start", "wait"] = "start"
    name: str = Field(default="", description="start: a short name for the worker.")
    task: str = Field(default="", description="start: the whole sub-task; the worker sees nothing else.")
    context: str = Field(default="", description="start: facts the worker needs (it has no other context).")
    tools: list[str] | None = Field(default=None, description="start: restrict the worker to these tools.")
    max_turns: int | None = Field(default=None, ge=1, le=50)
    timeout_s: float | None = Field(default=None, gt=0)
    wait: bool = Field(default=True, description="start: wait for the result (false: continue; collect with wait).")
    ids: list[str] | None = Field(default=None, description="wait: worker ids (default: all not yet collected).")
    first: bool = Field(default=False, description="wait: return as soon as one finishes (the rest keep running).")


def make_spawn_tool(pool: WorkerPool) -> Tool[SpawnInput]:
    async def spawn(args: SpawnInput, ctx: ToolContext) -> str:
        if args.action == "wait":
            return _report(await pool.wait(ctx, args.ids, first=args.first))
        if not args.task.strip():
            raise ToolError("start needs the task.")
        record = pool.start(ctx, args.name, args.task, args.context, args.tools, args.max_turns, args.timeout_s)
        if not args.wait:
            return f"Worker {record.id} (“{record.name}”) started; collect its result with action wait."
        return _report(await pool.wait(ctx, [record.id]))

    return Tool(
        name="spawn",
        description=(
            "Hand an independent sub-task to a worker with its own isolated context (only the task "
            "and context you pass), fewer tools and a turn budget. Several spawn calls in one "
            "message run concurrently. Results come back with a status: completed, failed, "
            "timed_out, budget_exceeded or cancelled."
        ),
        input_model=SpawnInput,
        risk=Risk.READ,
        func=spawn,
        timeout_s=WAIT_S,
        describe_action=lambda a: f"spawn {a.name}: {a.task}",
    )


def _report(records: list[WorkerRecord]) -> str:
    if not records:
        return "No workers to wait for."
    return "\n\n".join(f"Worker {r.id} (“{r.name}”): {r.status}\n{r.result or ''}".rstrip() for r in records)
