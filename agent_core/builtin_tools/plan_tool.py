"""The `plan` tool: keep a plan whose steps each say when they are done, advance only with
evidence, change the locked goal only by telling the user, abort honestly."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent_core.plans import PlanBook, Verdict
from agent_core.risk import Risk
from agent_core.tools import RunEnd, Tool, ToolContext, ToolError

DESCRIPTION = (
    "Keep a plan for a multi-step task; the user sees the current step as a progress line. "
    "create: steps (each with done_when, a condition you can check from tool results), and "
    "optionally the goal and constraints to lock. next: the current step is done — goal_check "
    "must state the evidence from tool results that its done_when holds (no evidence → not "
    "advanced; 3 times in a row ends the task). On the last step, next completes the plan; add "
    "summary to end with it. update: replace the remaining steps (with a reason). abort: stop "
    "the task when you cannot continue — say what was done, what was not, and why. set_goal: "
    "change the locked goal/constraints with a reason (the user is told)."
)


class StepInput(BaseModel):
    title: str = Field(description="What this step does, short.")
    done_when: str = Field(description="A checkable condition, e.g. 'systemctl says active'.")


class PlanInput(BaseModel):
    action: Literal["create", "next", "update", "abort", "set_goal"]
    steps: list[StepInput] | None = Field(default=None, description="create / update.")
    goal: str | None = Field(default=None, description="create / set_goal: the task's goal, verbatim.")
    constraints: list[str] | None = Field(default=None, description="create / set_goal.")
    goal_check: str | None = Field(default=None, description="next: the evidence that done_when holds.")
    summary: str | None = Field(default=None, description="next on the last step: the final summary.")
    reason: str | None = Field(default=None, description="update / set_goal: why.")
    done: str | None = Field(default=None, description="abort: what was done.")
    not_done: str | None = Field(default=None, description="abort: what was not done.")
    why: str | None = Field(default=None, description="abort: why you cannot continue.")


def make_plan_tool(book: PlanBook) -> Tool[PlanInput]:
    async def plan(args: PlanInput, ctx: ToolContext) -> str:
        steps = [(s.title, s.done_when) for s in args.steps or ()]
        match args.action:
            case "create":
                verdict = await book.create(ctx.session_key, ctx.run_id, steps, args.goal, args.constraints)
            case "next":
                verdict = await book.advance(ctx.session_key, args.goal_check, args.summary)
            case "update":
                verdict = await book.update(ctx.session_key, steps, args.reason)
            case "abort":
                verdict = await book.abort(ctx.session_key, args.done, args.not_done, args.why)
            case _:
                verdict, lock = await book.set_goal(ctx.session_key, args.goal, args.constraints, args.reason)
                if lock is not None and ctx.messenger is not None:
                    # Changing the goal is never silent: the user reads the new one and why.
                    shown = "\n".join(f"- {c}" for c in lock.constraints)
                    await ctx.messenger.send(
                        f"🎯 Goal changed: {lock.goal}" + (f"\nConstraints:\n{shown}" if shown else "")
                        + f"\nWhy: {lock.reason}"
                    )
        book.forget(ctx.session_key)  # the next model call reads the plan as now stored
        return await _report(verdict, ctx)

    return Tool(
        name="plan",
        description=DESCRIPTION,
        input_model=PlanInput,
        risk=Risk.READ,
        func=plan,
        describe_action=lambda a: f"plan {a.action}",
    )


async def _report(verdict: Verdict, ctx: ToolContext) -> str:
    if verdict.progress is not None and ctx.emit is not None:
        await ctx.emit(verdict.progress)
    if verdict.end is not None:
        reason, message, failed = verdict.end
        ctx.end = RunEnd(reason, message, failed)
    if verdict.error:
        raise ToolError(verdict.text)
    return verdict.text
