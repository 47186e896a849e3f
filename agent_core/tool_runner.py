"""Runs the tool calls of one model message: concurrently, each behind policy, approval and
a timeout, every failure turned into an error result the model can read."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_core.approvals import ApprovalGate, Decision
from agent_core.events import Event, ToolFinished, ToolStarted
from agent_core.ports import RunStore
from agent_core.risk import DEFAULT_POLICY, Risk, Scope, Verdict
from agent_core.tools import DEFAULT_TOOL_TIMEOUT_S, Tool, ToolContext, ToolError, ToolRegistry, cap_output

log = logging.getLogger(__name__)

Emit = Callable[[Event], Awaitable[None]]
Policy = Mapping[Scope, Mapping[Risk, Verdict]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    call_id: str
    content: str
    is_error: bool

    def as_block(self) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.call_id, "content": self.content}
        if self.is_error:
            block["is_error"] = True
        return block


class ToolRunner:
    def __init__(
        self,
        registry: ToolRegistry,
        gate: ApprovalGate | None,
        store: RunStore,
        *,
        policy: Policy = DEFAULT_POLICY,
        default_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    ) -> None:
        self._registry = registry
        self._gate = gate
        self._store = store
        self._policy = policy
        self._default_timeout_s = default_timeout_s

    def verdict(self, scope: Scope, tool: Tool[Any], grants: set[str]) -> Verdict:
        verdict = self._policy[scope][tool.risk]
        if verdict is Verdict.ASK and tool.name in grants:
            return Verdict.ALLOW
        return verdict

    async def run_all(
        self, calls: list[ToolCall], ctx: ToolContext, grants: set[str], emit: Emit
    ) -> list[ToolOutcome]:
        """Run every call concurrently; results come back in the order of `calls`."""
        outcomes: list[ToolOutcome | None] = [None] * len(calls)

        async def one(index: int, call: ToolCall) -> None:
            outcomes[index] = await self._run_one(call, ctx, grants, emit)

        async with asyncio.TaskGroup() as group:
            for index, call in enumerate(calls):
                group.create_task(one(index, call))
        return [o for o in outcomes if o is not None]

    async def _run_one(
        self, call: ToolCall, ctx: ToolContext, grants: set[str], emit: Emit
    ) -> ToolOutcome:
        tool = self._registry.get(call.name)
        risk = tool.risk if tool else Risk.READ
        await emit(ToolStarted(call.id, call.name, call.input, risk))
        await self._store.record_tool_call(ctx.run_id, call.id, call.name, call.input)
        started = time.monotonic()
        try:
            outcome = await self._execute(tool, call, ctx, grants, emit)
        except asyncio.CancelledError:
            await asyncio.shield(
                self._store.finish_tool_call(call.id, "cancelled", True, time.monotonic() - started)
            )
            raise
        duration = time.monotonic() - started
        await self._store.finish_tool_call(call.id, outcome.content, outcome.is_error, duration)
        await emit(ToolFinished(call.id, call.name, outcome.is_error, outcome.content, duration))
        return outcome

    async def _execute(
        self,
        tool: Tool[Any] | None,
        call: ToolCall,
        ctx: ToolContext,
        grants: set[str],
        emit: Emit,
    ) -> ToolOutcome:
        def error(message: str) -> ToolOutcome:
            return ToolOutcome(call.id, message, True)

        if tool is None:
            available = ", ".join(self._registry.names()) or "none"
            return error(f"Unknown tool {call.name!r}. Available tools: {available}.")
        try:
            parsed = tool.input_model.model_validate(call.input)
        except ValidationError as exc:
            return error(f"Invalid input for {tool.name}: {_validation_summary(exc)}")

        verdict = self.verdict(ctx.scope, tool, grants)
        if verdict is Verdict.DENY:
            return error(
                f"Denied by policy: {tool.name} (risk class {tool.risk.value}) is not allowed "
                f"in this {'private' if ctx.scope is Scope.MAIN else 'shared'} session."
            )
        if verdict is Verdict.ASK:
            if self._gate is None:
                return error(f"{tool.name} needs approval and no one can approve here.")
            decision = await self._gate.request(
                session_key=ctx.session_key,
                run_id=ctx.run_id,
                call_id=call.id,
                tool_name=tool.name,
                risk=tool.risk,
                action=tool.action_text(parsed),
                emit=emit,
            )
            if decision is Decision.ALWAYS:
                grants.add(tool.name)
            if not decision.allows:
                reason = "the approval expired" if decision is Decision.EXPIRED else "the user denied it"
                return error(f"Not run: {reason}. Do not retry the same action unless asked.")

        timeout_s = tool.timeout_s if tool.timeout_s is not None else self._default_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                output = await tool.func(parsed, ctx)
        except TimeoutError:
            return error(f"{tool.name} timed out after {timeout_s:g} s and was stopped.")
        except ToolError as exc:
            return error(cap_output(str(exc)))
        except Exception as exc:
            log.warning("tool.failed", extra={"tool": tool.name}, exc_info=True)
            return error(cap_output(f"{tool.name} failed: {type(exc).__name__}: {exc}"))
        return ToolOutcome(call.id, cap_output(output if isinstance(output, str) else str(output)), False)


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:8]:
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
