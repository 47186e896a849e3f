"""The turn loop: call the model, run the tools it asks for, feed the results back, repeat —
within a turn budget, with loop detection, correction rounds for malformed calls, and a
transcript that is valid for the Messages API at every await."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from agent_core.compaction import CompactionCall, Compactor
from agent_core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    TextDelta,
    ThinkingChanged,
    TurnEnded,
    Usage,
)
from agent_core.llm import LLMBadRequest, LLMClient, LLMError, LLMRequest, MessageComplete, TextChunk, ThinkingChunk
from agent_core.models import DEFAULT_MODEL, ModelTable
from agent_core.ports import AgentStore
from agent_core.prompt import ContextParts, request_messages, system_blocks, tool_definitions
from agent_core.request_shape import budget_within_limit, history_budget, laid_out, rejected_message
from agent_core.risk import Scope
from agent_core.tool_runner import ToolCall, ToolOutcome, ToolRunner
from agent_core.tools import Messenger, ToolContext, ToolRegistry
from agent_core.text import clean_json, is_clean
from agent_core.transcript import repair, size_of, tool_use_ids, unique_tool_ids, window
from agent_core import web_search

log = logging.getLogger(__name__)

ContextBuilder = Callable[[str, Scope, datetime], ContextParts]
ToolContextFactory = Callable[["RunRequest"], ToolContext]
ServerTools = Callable[["RunRequest"], list[dict[str, Any]]]
"""The service's own tools offered to a run (agent_core.web_search), decided per run."""
PinnedSource = Callable[["RunRequest"], Awaitable[str]]
"""Text pinned after the cached prefix on every model call (goal lock, current plan step)."""
BetweenTurns = Callable[["RunRequest", int, Usage], Awaitable[str | None]]
"""Asked after compaction's calls and after each model call that asked for tools, with the
turns and usage so far: a text ends the run with that message before its next model call
(once the turn's tool results are stored): the spend cap."""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    model: str = DEFAULT_MODEL
    max_turns: int = 10
    max_tokens: int = 4096
    max_corrections: int = 3
    loop_repeats: int = 3
    """The same tool with the same input this many times in one run ends the run."""
    history_budget_chars: int | None = None
    """How much earlier conversation is sent, in characters; older turns are left out. None:
    `agent_core.request_shape.CHARS_PER_WINDOW_TOKEN` × the model's context window (agent_core.models), so a 1M-window
    model gets the room it has. Compaction runs before windowing would leave turns out."""
    thinking: dict[str, Any] | None = None
    """The `thinking` parameter sent (agent_core.models.thinking_param); None: off, not sent."""
    volatile_in_tail: bool = True
    """Send the volatile system parts (clock, today's log, pinned goal) after the
    conversation's cache breakpoint instead of before it (agent_core.prompt.cache_layout):
    with today's log as of the conversation's start (workspace.context.LogCutoffs), 96.0 % of
    prompt tokens after the first request are read from cache over a 30-message session
    instead of 52.9 % (bench/bench_cache.py). False only to measure the old layout."""


@dataclass(frozen=True, slots=True)
class RunRequest:
    session_key: str
    scope: Scope
    content: list[dict[str, Any]]
    """The user's message as content blocks (queued messages already joined)."""
    model: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    messenger: Messenger | None = None
    """Delivers send_message calls to the chat this run answers."""
    requester: str = ""
    """Identity of the person whose message started the run (e.g. "telegram:123")."""
    steer: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    """Queue mode `steer`: asked at each tool boundary for user text that arrived meanwhile;
    its blocks join the tool results' user message (after them, so the transcript stays valid)."""
    account: str = ""
    """The session whose budget the run counts against when it is not its own (a worker's:
    the chat that spawned it)."""
    scheduled: bool = False
    """A scheduled job's run (or a worker of one): the owner's exemption from a sub scope's
    budget does not hold for it, between turns as at admission."""


class _Stop(Exception):
    def __init__(self, reason: str, notice: str) -> None:
        self.reason = reason
        self.notice = notice


class AgentLoop:
    def __init__(
        self,
        *,
        llm: LLMClient,
        tools: ToolRegistry,
        runner: ToolRunner,
        store: AgentStore,
        context: ContextBuilder,
        tool_context: ToolContextFactory,
        config: LoopConfig = LoopConfig(),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        pinned: PinnedSource | None = None,
        compactor: Compactor | None = None,
        between_turns: BetweenTurns | None = None,
        models: ModelTable | None = None,
        server_tools: ServerTools | None = None,
    ) -> None:
        self._server_tools = server_tools
        self.models = models if models is not None else ModelTable()
        self._pinned = pinned
        self.between_turns = between_turns
        self.compactor = compactor
        self._llm = llm
        self._tools = tools
        self._runner = runner
        self._store = store
        self._context = context
        self._tool_context = tool_context
        self.config = config
        self._now = now
        # Per model: the history budget a "prompt is too long" taught us, so later runs fit
        # at once instead of paying a refused request each.
        self._learned_budget: dict[str, int] = {}
        self._tool_defs: tuple[tuple[tuple[str, ...], int], list[dict[str, Any]]] | None = None

    async def run(self, request: RunRequest) -> AsyncIterator[Event]:
        """Yield the run's events: RunStarted first, RunFinished or RunFailed last.

        Cancelling the consumer cancels the run; the transcript is left valid either way.
        """
        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        async def emit(event: Event) -> None:
            queue.put_nowait(event)

        async def body() -> None:
            try:
                await self._run(request, emit)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(body(), name=f"run:{request.run_id}")
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task  # surfaces an unexpected crash of the body
        finally:
            if not task.done():
                task.cancel()
                # wait() neither raises the body's CancelledError nor swallows our own.
                await asyncio.wait({task})

    async def _run(self, request: RunRequest, emit: Callable[[Event], Any]) -> None:
        model = request.model or self.config.model
        run_id = request.run_id
        content = clean_json(request.content)
        # One transaction records the run, reads the conversation and stores the user's
        # message: it is durable before the model is called.
        stored = await self._store.begin_run(
            run_id, request.session_key, model, content, account=request.account, requester=request.requester
        )
        await emit(RunStarted(run_id, request.session_key))
        budget = min(self._history_budget(self.models(model).context_window), self._learned_budget.get(model, 1 << 62))
        state = _RunState(budget=budget)
        finish = functools.partial(self._finish, request, state)
        try:
            # Cleaned again on load: rows written before text was cleaned at every entrance
            # must not wedge the session.
            stored = stored if is_clean(stored) else clean_json(stored)
            history = repair(stored)
            # Ids of the whole epoch, so a reused one is renamed even when its first use is
            # outside the window (a later window may include both).
            state.taken = tool_use_ids(history)
            context = self._context(request.session_key, request.scope, self._now())
            system = system_blocks(request.scope, context)
            server = self._server_tools(request) if self._server_tools is not None else []
            tool_defs = self._tool_definitions(request.scope, request.session_key, server=server)
            if server:  # outside the cached system block: the same prefix with and without
                system = [*system, {"type": "text", "text": "\n".join(SERVER_TOOL_NOTES.get(t["name"], "") for t in server)}]
            ctx = self._tool_context(request)
            ctx.emit = emit  # tools such as `plan` report progress as typed events
            if self.compactor is not None:
                # agent_core.compaction: the latest summary + newer turns; compacts first
                # (silently, within this run, under a timeout) when the context nears the window.
                history = await self._compacted(
                    request, model, system, tool_defs, stored, content, ctx, state, emit, repaired=history
                )

                async def recompact(messages: list[dict[str, Any]], window_tokens: int | None = None) -> None:
                    assert self.compactor is not None
                    self.compactor.force(request.session_key)
                    fresh = await self._compacted(
                        request, model, system, tool_defs, stored, content, ctx, state, emit, window_tokens
                    )
                    ours = messages[state.run_start :]
                    messages[:] = [*window(fresh, state.budget), *ours]
                    state.run_start = len(messages) - len(ours)

                state.recompact = recompact
            messages = window(history, state.budget)
            state.run_start = len(messages)
            messages.append({"role": "user", "content": content})
            grants: set[str] = set()  # unused: the runner looks up exact-input grant rules per call
            try:
                await self._turns(request, model, system, tool_defs, messages, ctx, grants, state, emit)
            except _Stop as stop:
                notice = stop.notice if not state.text else f"\n\n{stop.notice}"
                state.text += notice
                await emit(TextDelta(notice))
                state.stop_reason = stop.reason
            await finish("finished", state.stop_reason)
            await emit(
                RunFinished(run_id, state.stop_reason, state.turns, state.usage, state.text, state.model or model)
            )
        except LLMBadRequest as exc:
            if not exc.concerns_conversation:
                # A feature, parameter or model the service refused: the conversation is fine,
                # and starting over would not help. The message names what was refused.
                log.warning("run.request_unsupported", extra={"run": run_id, "detail": exc.detail})
                await finish("failed", "unsupported")
                await emit(RunFailed(run_id, str(exc), "unsupported", state.usage))
                return
            # Already retried once with a repaired, trimmed conversation: say so plainly.
            log.warning("run.request_rejected_twice", extra={"run": run_id, "detail": exc.detail})
            await finish("failed", "invalid_request")
            await emit(RunFailed(run_id, rejected_message(exc), "invalid_request", state.usage))
        except LLMError as exc:
            await finish("failed", type(exc).__name__)
            await emit(RunFailed(run_id, str(exc), type(exc).__name__, state.usage))
        except _Malformed as exc:
            await finish("failed", exc.kind)
            await emit(RunFailed(run_id, str(exc), exc.kind, state.usage))
        except asyncio.CancelledError:
            await finish("cancelled", "cancelled")
            raise
        except Exception as exc:
            # A bug of ours must still end the run visibly, never leave the user waiting.
            log.exception("run.crashed", extra={"run": run_id, "session": request.session_key})
            await finish("failed", "internal_error")
            await emit(
                RunFailed(run_id, f"Roost hit an internal error ({type(exc).__name__}); it has been logged.",
                          "internal_error", state.usage)
            )

    async def _compacted(
        self, request: RunRequest, model: str, system: list[dict[str, Any]], tool_defs: list[dict[str, Any]],
        stored: list[dict[str, Any]], content: list[dict[str, Any]], ctx: ToolContext, state: _RunState,
        emit: Callable[[Event], Any], window_tokens: int | None = None,
        repaired: list[dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """`repaired`: `repair(stored)`, when the caller made it (nothing has changed it since)."""
        assert self.compactor is not None

        async def silent_tools(uses: list[dict[str, Any]]) -> list[dict[str, Any]]:
            # The memory flush's tool calls: run like any other (policy, audit) but unseen —
            # except an approval card (memory_write set to `ask`): nothing waits invisibly.
            async def discard(event: Event) -> None:
                if isinstance(event, ApprovalRequested | ApprovalResolved):
                    await emit(event)

            calls = [ToolCall(b["id"], b["name"], b["input"]) for b in uses]
            return [o.as_block() for o in await self._runner.run_all(calls, ctx, set(), discard)]

        call = CompactionCall(
            request.session_key, model, system, tool_defs, stored, content, silent_tools, state.budget,
            context_window_tokens=window_tokens or self.models(model).context_window, repaired=repaired,
        )
        try:
            history = await self.compactor.prepare(call)
        finally:
            state.usage = state.usage + call.usage  # the flush and summary calls are spend too
        for notice in call.notices:  # told once: a failed attempt is recorded, not retried
            state.text += f"{notice}\n\n"
            await emit(TextDelta(f"{notice}\n\n"))
        return history

    async def _turns(
        self,
        request: RunRequest,
        model: str,
        system: list[dict[str, Any]],
        tool_defs: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        ctx: ToolContext,
        grants: set[str],
        state: _RunState,
        emit: Callable[[Event], Any],
    ) -> None:
        corrections = 0
        seen_calls: dict[str, int] = {}
        spent: str | None = None
        if self.between_turns is not None:
            # Before the first model call too (and after compaction's calls): a message admitted
            # under the cap may reach its run after another run crossed it.
            spent = await self.between_turns(request, 0, state.usage)
        for turn in range(1, self.config.max_turns + 1):
            if spent:  # the spend cap holds between turns, not only when the message was admitted
                raise _Stop("spend_cap", spent)
            state.turns = turn
            # The pinned goal and current step go after the cached prefix, fresh every turn.
            pinned = await self._pinned(request) if self._pinned is not None else ""
            turn_system = [*system, {"type": "text", "text": pinned}] if pinned else system
            if ctx.loaded:  # find_tools loaded deferred schemas: offered from now on in this run
                server = self._server_tools(request) if self._server_tools is not None else []
                tool_defs = self._tool_definitions(request.scope, request.session_key, ctx.loaded, server=server)
            done = await self._model_turn(model, turn_system, tool_defs, messages, state, emit)
            state.usage = state.usage + done.usage
            if turn == 1 and self.compactor is not None:
                self.compactor.observe(request.session_key, done.usage)  # calibrates its estimate
            state.model = done.model
            await emit(TurnEnded(turn))
            # What is sent must have unique tool_use ids (the API's rule) whatever the model
            # gave: rename repeats before anything stores or runs them.
            content, pairs = unique_tool_ids(done.content, state.taken)
            calls = [ToolCall(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
            if not calls and await self._stop_reason_continues(request, done, content, messages, state, emit):
                if self.between_turns is not None:  # a paused or retried turn is a turn: checked too
                    spent = await self.between_turns(request, turn, state.usage)
                continue
            if content and not calls:
                # The final answer is stored with the run's end, in one transaction.
                content = clean_json(content)
                messages.append({"role": "assistant", "content": content})
                state.final = content
            elif content:
                # Stored before any of its tool calls runs.
                await self._append(request, "assistant", content, messages)
            if not calls:
                state.stop_reason = done.stop_reason
                if (notice := _STOP_NOTICES.get(done.stop_reason)) is None and done.stop_reason not in _NORMAL_STOPS:
                    notice = f"(The model stopped for a reason Roost does not know: {done.stop_reason!r}.)"
                if notice:
                    raise _Stop(done.stop_reason, notice)
                return
            if self.between_turns is not None:  # asked before the tools run: workers see this turn's spend
                spent = await self.between_turns(request, turn, state.usage)
            malformed = _malformed_by_new_id(done, content, pairs)
            if done.stop_reason == "max_tokens":
                # A tool call cut off by the token limit has a truncated input: never run it.
                for call in calls:
                    malformed.setdefault(call.id, _TruncatedCall("cut off by the output token limit"))
            corrections = corrections + 1 if malformed else 0
            try:
                outcomes = await self._run_tools(calls, malformed, seen_calls, ctx, grants, emit)
            except asyncio.CancelledError:
                cancelled = [
                    ToolOutcome(c.id, "Cancelled: the user stopped the run.", True).as_block() for c in calls
                ]
                await self._append(request, "user", cancelled, messages)
                raise
            steered = await request.steer() if request.steer is not None else []
            await self._append(request, "user", [*(o.as_block() for o in outcomes), *steered], messages)
            if ctx.end is not None:  # a tool ended the run (plan abort, unsupported advances)
                end, ctx.end = ctx.end, None
                if end.failed:
                    raise _Malformed(end.message, end.reason)
                raise _Stop(end.reason, end.message)
            if malformed and corrections >= self.config.max_corrections:
                raise _Malformed(
                    f"Stopped: the model sent malformed tool calls {corrections} times in a row. "
                    "Please try again, perhaps rephrased."
                )
            repeated = [c.name for c in calls if seen_calls.get(_call_key(c), 0) >= self.config.loop_repeats]
            if repeated:
                raise _Stop(
                    "loop_detected",
                    f"(Stopped: {repeated[0]} was called {self.config.loop_repeats} times with the "
                    "same input. Tell me how to proceed.)",
                )
        raise _Stop(
            "max_turns",
            f"(Stopped after {self.config.max_turns} steps without a final answer; "
            "say 'continue' to go on.)",
        )

    async def _stop_reason_continues(
        self, request: RunRequest, done: MessageComplete, content: list[dict[str, Any]],
        messages: list[dict[str, Any]], state: _RunState, emit: Callable[[Event], Any],
    ) -> bool:
        """Stop reasons that call for another model turn rather than an answer: a paused
        server-tool turn is continued; a turn that ran out of context window is retried once
        after compacting (or, without a compactor, with half the history). Returns whether
        the loop should take another turn."""
        if done.stop_reason == "pause_turn":
            if content:
                await self._append(request, "assistant", content, messages)
            if not content or content[-1].get("type") == "text":
                # Sent back as is, a turn ending in text would be a prefill: today's models
                # refuse it. Asked in a user turn instead (not stored: a transient nudge).
                messages.append({"role": "user", "content": [{"type": "text", "text": PAUSE_PROMPT}]})
            return True
        if done.stop_reason == "model_context_window_exceeded" and not state.window_retried:
            state.window_retried = True
            log.warning("run.context_window_exceeded", extra={"run": request.run_id})
            notice = "(The conversation filled the model's context window; I compacted it and answered again.)\n\n"
            if state.text:
                notice = f"\n\n{notice}"
            state.text += notice
            await emit(TextDelta(notice))
            if state.recompact is not None:
                await state.recompact(messages, None)
            else:
                state.budget = min(state.budget, size_of(messages[: state.run_start]) // 2)
            return True
        return False

    async def _model_turn(
        self,
        model: str,
        system: list[dict[str, Any]],
        tool_defs: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        state: _RunState,
        emit: Callable[[Event], Any],
    ) -> MessageComplete:
        """One model call. A 400 invalid_request (before any text) is answered by repairing
        and trimming what is sent — down to this run's messages, within a budget that fits the
        model's limit when it said so — and retrying once per run; a second one propagates."""
        sent = self._sendable(messages, state)
        laid = laid_out(system, tool_defs, sent, self.config.volatile_in_tail)
        fit = functools.partial(self._fit, model, system, tool_defs, messages, state)
        try:
            return await self._stream(LLMRequest(model, *laid, self.config.max_tokens, fit=fit), state, emit)
        except LLMBadRequest as exc:
            if state.trimmed or state.streamed or not exc.concerns_conversation:
                raise
            log.warning("run.request_rejected", extra={"model": model, "detail": exc.detail})
            state.trimmed = True
            if exc.too_long:
                whole = size_of([{"content": system}, {"content": tool_defs}]) + size_of(sent)
                state.budget = budget_within_limit(exc, whole, size_of(sent), state.budget)
                self._learned_budget[model] = min(self._learned_budget.get(model, state.budget), state.budget)
        sent = self._sendable(messages, state)
        laid = laid_out(system, tool_defs, sent, self.config.volatile_in_tail)
        return await self._stream(LLMRequest(model, *laid, self.config.max_tokens), state, emit)

    async def _fit(
        self, model: str, system: list[dict[str, Any]], tool_defs: list[dict[str, Any]],
        messages: list[dict[str, Any]], state: _RunState, window_tokens: int,
    ) -> LLMRequest:
        """The turn's request made to fit a smaller window (a fallback model's): compacted to
        that window first when there is a compactor, and windowed to its budget either way."""
        log.info("run.fit_smaller_window", extra={"model": model, "window": window_tokens})
        state.budget = min(state.budget, self._history_budget(window_tokens))
        if state.recompact is not None:
            await state.recompact(messages, window_tokens)
        laid = laid_out(system, tool_defs, self._sendable(messages, state), self.config.volatile_in_tail)
        return LLMRequest(model, *laid, self.config.max_tokens)

    def _history_budget(self, window_tokens: int) -> int:
        return history_budget(window_tokens, self.config.history_budget_chars)

    def _tool_definitions(
        self, scope: Scope, session_key: str, loaded: set[str] | None = None, server: Sequence[dict[str, Any]] = (),
    ) -> list[dict[str, Any]]:
        # Built once per tool set: copying every schema on every run cost milliseconds, and
        # the same list keeps the cached prompt prefix byte-identical. Never mutated. Only
        # the tools offered to this scope (an MCP server a group was not given is left out),
        # then the service's own tools offered to this run (web search).
        names = tuple(self._tools.offered(scope, session_key, loaded or ()))
        key = (names, self._tools.version, tuple(t["name"] for t in server))
        if self._tool_defs is None or self._tool_defs[0] != key:
            self._tool_defs = (key, tool_definitions([*self._tools.schemas_of(names), *server]))
        return self._tool_defs[1]

    async def _finish(self, request: RunRequest, state: _RunState, status: str, stop_reason: str) -> None:
        """Close the run, storing its final answer in the same transaction. Shielded: a
        cancellation must not leave the answer stored without its run closed, or stored
        twice by the cancellation path's own finish."""
        final, state.final = state.final, None
        await asyncio.shield(
            self._store.finish_run(
                request.run_id, status, stop_reason, state.turns, state.usage,
                session_key=request.session_key, last_message=final,
            )
        )  # fmt: skip

    def _sendable(self, messages: list[dict[str, Any]], state: _RunState) -> list[dict[str, Any]]:
        if state.trimmed:
            # Repaired again and cut down to this run: whatever older turn the service
            # refused is left out.
            return request_messages(window(repair(messages[state.run_start :]), state.budget))
        return request_messages(window(messages, state.budget))

    async def _stream(
        self, llm_request: LLMRequest, state: _RunState, emit: Callable[[Event], Any]
    ) -> MessageComplete:
        done: MessageComplete | None = None
        state.streamed = False
        thinking = False
        async for item in self._llm.stream(replace(llm_request, thinking=self.config.thinking)):
            if isinstance(item, ThinkingChunk):
                if not thinking:
                    thinking = True
                    await emit(ThinkingChanged(True))
                continue
            if thinking:
                thinking = False
                await emit(ThinkingChanged(False))
            if isinstance(item, TextChunk):
                state.streamed = True
                state.text += item.text
                await emit(TextDelta(item.text))
            else:
                done = item
        assert done is not None, "LLMClient.stream must end with MessageComplete"
        return done

    async def _run_tools(
        self,
        calls: list[ToolCall],
        malformed: dict[str, Any],
        seen_calls: dict[str, int],
        ctx: ToolContext,
        grants: set[str],
        emit: Callable[[Event], Any],
    ) -> list[ToolOutcome]:
        runnable: list[ToolCall] = []
        fixed: dict[str, ToolOutcome] = {}
        for call in calls:
            if call.id in malformed:
                problem = malformed[call.id].problem
                fixed[call.id] = ToolOutcome(
                    call.id,
                    f"Your input for {call.name} was {problem}. Send the call again with a "
                    "complete JSON object matching the tool's schema.",
                    True,
                )
                continue
            key = _call_key(call)
            seen_calls[key] = seen_calls.get(key, 0) + 1
            if seen_calls[key] > self.config.loop_repeats:
                fixed[call.id] = ToolOutcome(call.id, "Not run: this exact call was repeated too often.", True)
                continue
            runnable.append(call)
        results = await self._runner.run_all(runnable, ctx, grants, emit) if runnable else []
        by_id = {o.call_id: o for o in results} | fixed
        return [by_id[c.id] for c in calls]

    async def _append(
        self, request: RunRequest, role: str, content: list[dict[str, Any]], messages: list[dict[str, Any]]
    ) -> None:
        # Written before anything acts on it, shielded so a cancellation cannot leave the
        # database and the in-memory conversation disagreeing. Cleaned here too, so nothing
        # the loop stores (user text, model output, tool output) can wedge a later request.
        content = clean_json(content)
        messages.append({"role": role, "content": content})
        await asyncio.shield(self._store.append_message(request.session_key, request.run_id, role, content))


class _Malformed(Exception):
    def __init__(self, message: str, kind: str = "malformed_output") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class _RunState:
    budget: int
    """Characters of conversation sent per request (see transcript.window)."""
    text: str = ""
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "end_turn"
    model: str = ""
    taken: set[str] = field(default_factory=set)
    """Every tool_use id in the conversation so far."""
    run_start: int = 0
    """Index of this run's user message in the in-memory conversation."""
    final: list[dict[str, Any]] | None = None
    """The final answer, not yet stored: stored by the run's finish."""
    window_retried: bool = False
    """A model_context_window_exceeded was answered by compacting and retrying (once)."""
    recompact: Callable[[list[dict[str, Any]], int | None], Awaitable[None]] | None = None
    """Compacts now and swaps the history in front of this run's messages (with a compactor)."""
    trimmed: bool = False
    """The service refused a request once; later ones send only this run's messages."""
    streamed: bool = False


PAUSE_PROMPT = "[Roost: continue your turn.]"
SERVER_TOOL_NOTES = {web_search.NAME: web_search.NOTE}
_NORMAL_STOPS = frozenset({"end_turn", "stop_sequence", "tool_use"})
_STOP_NOTICES = {
    "max_tokens": "(The answer reached the model's output limit and was cut short; say 'continue' for the rest.)",
    "refusal": "(The model declined to answer this. Rephrasing may help.)",
    "model_context_window_exceeded": (
        "(The conversation still fills the model's context window after compacting; send /compact or /new.)"
    ),
}


@dataclass(frozen=True, slots=True)
class _TruncatedCall:
    problem: str



def _malformed_by_new_id(
    done: MessageComplete, content: list[dict[str, Any]], pairs: list[tuple[str, str]]
) -> dict[str, Any]:
    """The model's malformed tool uses keyed by the ids they were renamed to."""
    out: dict[str, Any] = {}
    for item in done.malformed:
        if item.block_index is not None and item.block_index < len(content):
            out[content[item.block_index]["id"]] = item
        else:
            new = next((n for o, n in pairs if o == item.call_id and n not in out), None)
            if new is not None:
                out[new] = item
    return out


def _call_key(call: ToolCall) -> str:
    return f"{call.name}:{json.dumps(call.input, sort_keys=True, ensure_ascii=False)}"
