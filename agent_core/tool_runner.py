"""Runs the tool calls of one model message: concurrently, each behind policy, approval and
a timeout, every failure turned into an error result the model can read, every call audited."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from agent_core.approvals import ApprovalGate, Decision
from agent_core.events import Event, ToolFinished, ToolStarted
from agent_core.grant_binding import Unbindable, command_binding
from agent_core.policy import DEFAULT, GrantRule, Policy, canonical_json, grant_input
from agent_core.ports import AuditEntry, AuditSink, RunStore
from agent_core.risk import Risk, Scope, Verdict
from agent_core.text import is_clean
from agent_core.prompt import UNTRUSTED_RESULT_TOOLS, frame_untrusted
from agent_core.scrub import redact_json, redact_secrets, relative_paths
from agent_core.text import clean_text
from agent_core.tools import (
    DEFAULT_TOOL_TIMEOUT_S, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, cap_output,
)  # fmt: skip

log = logging.getLogger(__name__)

Emit = Callable[[Event], Awaitable[None]]
PolicySource = Callable[[], Policy]
CallCap = Callable[[ToolContext], int]
"""Tool calls one run may make (0 = unlimited), e.g. from the live [limits] table."""

_RUNS_TRACKED = 4096
"""Per-run call counters kept (far above the concurrent runs; oldest forgotten first)."""


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
    blocks: tuple[dict[str, Any], ...] = ()
    """Image blocks after the text (an MCP tool's pictures)."""

    def as_block(self) -> dict[str, Any]:
        content: str | list[dict[str, Any]] = self.content
        if self.blocks:
            content = [{"type": "text", "text": self.content or "(image)"}, *self.blocks]
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.call_id, "content": content}
        if self.is_error:
            block["is_error"] = True
        return block


@dataclass(slots=True)
class _Trail:
    """What the audit entry of one call says, filled in as the call proceeds."""

    detail: str = ""
    decision: str = ""
    approver: str | None = None
    status: str = "error"


class CallCounts:
    """Tool calls per run, shared by every runner whose calls count together (a run's and
    its workers'); the oldest runs are forgotten first."""

    def __init__(self, kept: int = _RUNS_TRACKED) -> None:
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._kept = kept

    def add(self, run_id: str) -> int:
        """Count one more call of `run_id`; returns its count so far."""
        count = self._counts.pop(run_id, 0) + 1
        self._counts[run_id] = count
        while len(self._counts) > self._kept:
            self._counts.popitem(last=False)
        return count


class GrantLookup(Protocol):
    async def has_grant(self, rule: GrantRule) -> bool: ...


class ToolRunner:
    def __init__(
        self,
        registry: ToolRegistry,
        gate: ApprovalGate | None,
        store: RunStore,
        *,
        policy: Policy | PolicySource = DEFAULT,
        default_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
        audit: AuditSink | None = None,
        grants: GrantLookup | None = None,
        call_cap: CallCap | int = 0,
        untrusted_results: Collection[str] = UNTRUSTED_RESULT_TOOLS,
        counts: CallCounts | None = None,
        workers_running: Callable[[str], bool] | None = None,
    ) -> None:
        """`policy` is read on every call (pass the live config's getter to hot-reload);
        `grants` defaults to `store` when it can look grants up; `counts` is shared with the
        runners of the workers whose calls count against the same run's cap."""
        self._registry = registry
        self._gate = gate
        self._store = store
        self._policy = _policy_source(policy)
        self._default_timeout_s = default_timeout_s
        self._audit = audit
        self._grants: GrantLookup | None = grants
        if grants is None and hasattr(store, "has_grant"):
            self._grants = store  # type: ignore[assignment]
        self._call_cap: CallCap = call_cap if callable(call_cap) else (lambda _ctx, n=call_cap: n)
        self._untrusted = frozenset(untrusted_results)
        self._counts = counts if counts is not None else CallCounts()
        self.workers_running: Callable[[str], bool] = workers_running or (lambda _run_id: False)
        """Whether a run has workers still running (set by the composition root once its
        WorkerPool exists): they write with their own tools while the run goes on."""

    async def _decide(
        self, policy: Policy, ctx: ToolContext, tool: Tool[Any], parsed: BaseModel, normalised: str, alone: bool
    ) -> tuple[Verdict, str, GrantRule | None]:
        """(verdict, what decided it: a policy key or "grant", the rule "Always allow" would
        store or None). Policy first; then a stored grant for this exact input — and, for a
        command naming workspace files, their current content — may turn `ask` into `allow`.
        A grant bound to files holds only for a call without a writing call beside it in
        the same batch, outside a worker and while the run has no worker running: those run
        at the same time and could rewrite the files first."""
        decided = policy.decide(ctx.scope, ctx.session_key, tool.name, tool.risk)
        if decided.verdict is not Verdict.ASK or not policy.grant_may_apply(ctx.scope, tool.risk):
            return decided.verdict, decided.source, None
        binding = ""
        command = getattr(parsed, "command", None) if tool.name == "exec" else None
        if isinstance(command, str):
            try:
                binding = await asyncio.to_thread(command_binding, command, ctx.workspace)
            except Unbindable:
                return decided.verdict, decided.source, None  # asked every time
        rule = GrantRule(ctx.session_key, tool.name, normalised, binding)
        # Nothing else of the run may write while a bound command runs: not a call beside it,
        # not its parent or a sibling (it is a worker), not a worker it left running.
        alone = alone and not ctx.cap_run_id and not self.workers_running(ctx.run_id)
        if self._grants is not None and (alone or not binding) and await self._grants.has_grant(rule):
            return Verdict.ALLOW, "grant", rule
        return decided.verdict, decided.source, rule

    async def run_all(
        self, calls: list[ToolCall], ctx: ToolContext, grants: object, emit: Emit
    ) -> list[ToolOutcome]:
        """Run every call concurrently; results come back in the order of `calls`.

        `grants` is ignored (stored grant rules are looked up per call); it stays in the
        signature for callers that still pass the session's grants."""
        outcomes: list[ToolOutcome | None] = [None] * len(calls)
        # Calls that may change workspace files while the others run (a worker writes with
        # its own tools): beside one, a grant bound to file content is not honoured.
        writing = [
            (t := self._registry.get(c.name)) is None or t.risk is not Risk.READ or c.name == "spawn"
            for c in calls
        ]

        async def one(index: int, call: ToolCall) -> None:
            alone = not any(w for i, w in enumerate(writing) if i != index)
            outcomes[index] = await self._run_one(call, ctx, emit, alone)

        async with asyncio.TaskGroup() as group:
            for index, call in enumerate(calls):
                group.create_task(one(index, call))
        return [o for o in outcomes if o is not None]

    async def _run_one(self, call: ToolCall, ctx: ToolContext, emit: Emit, alone: bool = True) -> ToolOutcome:
        tool = self._registry.get(call.name)
        risk = tool.risk if tool else Risk.READ
        await emit(ToolStarted(call.id, call.name, call.input, risk))
        await self._store.record_tool_call(ctx.run_id, call.id, call.name, call.input)
        started = time.monotonic()
        trail = _Trail(detail=_fallback_detail(call.input))
        try:
            outcome = await self._execute(tool, call, ctx, emit, trail, alone)
        except asyncio.CancelledError:
            duration = time.monotonic() - started
            await asyncio.shield(
                self._store.finish_tool_call(call.id, "cancelled", True, duration, run_id=ctx.run_id)
            )
            trail.status = "cancelled"
            await asyncio.shield(self._record(call, ctx, trail, 0, duration))
            raise
        duration = time.monotonic() - started
        # Cleaned at the source, so the chat's status line sees the same safe text as the transcript.
        outcome = dataclasses.replace(outcome, content=clean_text(outcome.content))
        await self._store.finish_tool_call(call.id, outcome.content, outcome.is_error, duration, run_id=ctx.run_id)
        await self._record(call, ctx, trail, len(outcome.content), duration)
        await emit(ToolFinished(call.id, call.name, outcome.is_error, outcome.content, duration))
        return outcome

    async def _record(self, call: ToolCall, ctx: ToolContext, trail: _Trail, size: int, duration: float) -> None:
        if self._audit is None:
            return
        entry = AuditEntry(
            kind="tool_call",
            actor=ctx.requester or "system",
            session_key=ctx.session_key,
            subject=call.name,
            detail=trail.detail,
            decision=trail.decision,
            approver=trail.approver,
            status=trail.status,
            size=size,
            duration_s=duration,
        )
        try:
            await self._audit.audit(entry)
        except Exception:  # the sink promises not to raise; an audit bug must not fail a call
            log.exception("audit.write_failed", extra={"tool": call.name})

    def _over_cap(self, ctx: ToolContext) -> int:
        """The cap if this call exceeds it, else 0. Counts every call of the run (and of
        the workers it spawned)."""
        count = self._counts.add(ctx.cap_run_id or ctx.run_id or ctx.session_key)
        cap = self._call_cap(ctx)
        return cap if cap and count > cap else 0

    async def _execute(
        self, tool: Tool[Any] | None, call: ToolCall, ctx: ToolContext, emit: Emit, trail: _Trail, alone: bool
    ) -> ToolOutcome:
        def error(message: str, status: str = "error") -> ToolOutcome:
            trail.status = status
            return ToolOutcome(call.id, relative_paths(message, ctx.workspace), True)

        cap = self._over_cap(ctx)
        if cap:
            trail.decision = "deny"
            return error(
                f"Not run: this run reached its limit of {cap} tool calls ([limits] "
                "tool_calls_per_run). Answer with what you have; the user can say 'continue'.",
                "denied",
            )
        if tool is None:
            available = ", ".join(self._registry.names()) or "none"
            return error(f"Unknown tool {call.name!r}. Available tools: {available}.")
        try:
            parsed = tool.input_model.model_validate(call.input)
        except ValidationError as exc:
            return error(f"Invalid input for {tool.name}: {_validation_summary(exc)}")
        normalised = grant_input(tool.name, parsed)
        trail.detail = _audit_detail(tool.name, parsed, normalised)

        policy = self._policy()  # one snapshot for the whole decision, even across a reload
        verdict, source, rule = await self._decide(policy, ctx, tool, parsed, normalised, alone)
        trail.decision = verdict.value
        if source == "grant":
            trail.approver = "grant"  # a stored 'always allow' rule for this exact input
        if verdict is Verdict.DENY:
            return error(
                f"Denied by policy: {tool.name} (risk class {tool.risk.value}) is not allowed "
                f"in this {'private' if ctx.scope is Scope.MAIN else 'shared'} session ({source}).",
                "denied",
            )
        if verdict is Verdict.ASK:
            if self._gate is None:
                return error(f"{tool.name} needs approval and no one can approve here.", "denied")
            grantable = rule is not None and is_clean(normalised)
            answer = await self._gate.ask(
                session_key=ctx.session_key,
                run_id=ctx.run_id,
                call_id=call.id,
                tool_name=tool.name,
                risk=tool.risk,
                action=tool.action_text(parsed),
                emit=emit,
                grant=rule if grantable else None,
            )
            trail.approver = answer.approver
            if not answer.decision.allows:
                expired = answer.decision is Decision.EXPIRED
                reason = "the approval expired" if expired else "the user denied it"
                return error(f"Not run: {reason}. Do not retry the same action unless asked.", "denied")

        timeout_s = tool.timeout_s if tool.timeout_s is not None else self._default_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                output = await tool.func(parsed, ctx)
        except TimeoutError:
            return error(f"{tool.name} timed out after {timeout_s:g} s and was stopped.", "timeout")
        except ToolError as exc:
            return error(cap_output(str(exc)))
        except Exception as exc:
            log.warning("tool.failed", extra={"tool": tool.name}, exc_info=True)
            return error(cap_output(f"{tool.name} failed: {type(exc).__name__}: {exc}"))
        trail.status = "ok"
        blocks: tuple[dict[str, Any], ...] = ()
        if isinstance(output, ToolOutput):
            output, blocks = output.text, output.blocks
        text = cap_output(output if isinstance(output, str) else str(output))
        if tool.name in self._untrusted:
            text = frame_untrusted(text, tool.name)
        return ToolOutcome(call.id, text, False, blocks)


def _policy_source(policy: Policy | PolicySource) -> PolicySource:
    if isinstance(policy, Policy):
        return lambda: policy
    return policy


def _audit_detail(tool_name: str, parsed: BaseModel, normalised: str) -> str:
    """The normalised input as recorded: secrets' values replaced."""
    if tool_name == "exec":
        return redact_secrets(normalised)
    return canonical_json(redact_json(parsed.model_dump(mode="json")))


def _fallback_detail(raw: dict[str, Any]) -> str:
    """The raw input of a call that never validated, secrets' values replaced."""
    try:
        return canonical_json(redact_json(raw))
    except (TypeError, ValueError):
        return redact_secrets(repr(raw))


def _validation_summary(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:8]:
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
