"""Context compaction: when a session's context nears the model's window, a silent turn lets
the agent save what matters to memory, then the older turns are replaced — in what is sent,
never in what is stored — by a structured summary with the tool-chain seed's sections.

Invariants:
- the stored transcript keeps every message; a compaction record says how many of the
  epoch's first messages its summary stands for (`covered`), and each run sends the summary
  followed by the messages after them;
- the cut is always at a user message that holds no tool_result, so a tool_use is never
  separated from its tool_result, and the newest ~`keep_recent_tokens` stay verbatim;
- a failed summary changes nothing that is sent (windowing still applies), the user is told
  once, and the attempt is recorded: the next automatic attempt waits until the context has
  grown by another `retry_growth` of the window (no loop); `/compact` forces one;
- everything runs inside the session's own run, under `timeout_s` (no deadlock);
- the goal lock / pinned block is added after the prefix on every call by the loop, so it is
  never part of what is summarised.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent_core.events import Usage
from agent_core.llm import LLMClient, LLMRequest, MessageComplete, TextChunk
from agent_core.text import json_text
from agent_core.transcript import repair, size_of, window

log = logging.getLogger(__name__)

SECTIONS: tuple[str, ...] = (
    "Active task",
    "Goal",
    "Constraints",
    "Completed actions",
    "Active state",
    "In progress",
    "Blocked",
    "Key decisions",
    "Resolved questions",
)
"""The seed's structured summary (tool-chain engineering, 1.2), in its order."""

SUMMARY_HEADER = "[Summary of the earlier conversation — older turns were compacted; the full transcript is stored]"

FLUSH_PROMPT = (
    "[Context compaction] This conversation is about to be compacted: older turns will be "
    "replaced by a summary. Before that, save anything worth keeping long-term with "
    "memory_write (durable facts, preferences and decisions to MEMORY.md where allowed, "
    "otherwise this chat's log). Use only memory tools now. Reply with a short 'saved' when done; "
    "the user does not see this turn."
)

SUMMARY_SYSTEM = (
    "You compress an agent's conversation into a structured summary that replaces it. Keep "
    "every fact the agent needs to continue: file names, commands, results, numbers, decisions "
    "and their reasons, open questions. Drop chatter and stale detail. Answer with exactly these "
    "sections, each a '## ' heading followed by short bullet points ('- none' when empty):\n"
    + "\n".join(f"## {s}" for s in SECTIONS)
)

_RATIOS_KEPT = 1024

DEFAULT_WINDOW_TOKENS = 200_000
COUNT_BAND = (0.5, 2.0)
"""Estimates within this share of the threshold are checked with count_tokens (uncalibrated)."""
WINDOW_SHARE = 0.9
"""Compaction is due when the history fills this share of the loop's window budget."""

MEMORY_TOOLS = frozenset({"memory_write", "memory_search", "memory_get"})


@dataclass(frozen=True, slots=True)
class CompactionConfig:
    context_window_tokens: int | None = None
    """An override of every model's window (ROOST_AGENT__CONTEXT_WINDOW_TOKENS); None: the
    window of the model the run uses (CompactionCall.context_window_tokens)."""
    compact_at: float = 0.75
    """Compact when the estimated context reaches this share of the window."""
    keep_recent_tokens: int = 20_000
    """The newest turns kept verbatim (at least the last whole turn)."""
    timeout_s: float = 120.0
    """Memory flush + summary together; past it the attempt counts as failed."""
    flush_turns: int = 3
    summary_max_tokens: int = 4096
    max_summary_input_chars: int = 400_000
    """What the summary call reads at most (tool results are cut first)."""
    before_window: bool = True
    """Also compact when the history nears the loop's window budget (see CompactionCall)."""
    retry_growth: float = 0.10
    """After a failed attempt, the next automatic one waits for this much more of the window."""

    def window_for(self, call_window: int | None) -> int:
        return self.context_window_tokens or call_window or DEFAULT_WINDOW_TOKENS

    @property
    def threshold_tokens(self) -> int:
        return int(self.window_for(None) * self.compact_at)


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    session_key: str
    covered: int
    """How many of the epoch's stored messages (oldest first) the summary stands for."""
    summary: str
    tokens_before: int
    tokens_after: int
    ok: bool
    error: str = ""
    forced: bool = False
    created_at: datetime | None = None


class CompactionStore(Protocol):
    async def compaction_state(self, session_key: str) -> tuple[CompactionRecord | None, CompactionRecord | None]:
        """(latest successful compaction, latest attempt) of the session's current epoch."""
        ...

    async def save_compaction(self, record: CompactionRecord) -> None: ...


ToolRunnerFn = Callable[[list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]
"""Runs a silent turn's tool_use blocks, returns their tool_result blocks in order."""


@dataclass
class CompactionCall:
    """What one run hands the compactor (built by the loop)."""

    session_key: str
    model: str
    system: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stored: list[dict[str, Any]]
    """The epoch's stored messages, cleaned, oldest first (before this run's message)."""
    incoming: list[dict[str, Any]]
    """This run's user content (counted in the estimate; never summarised)."""
    run_tools: ToolRunnerFn
    history_budget_chars: int | None = None
    """The loop's window budget: compaction is also due before windowing would leave turns
    out (so nothing is left out silently while the context is still under the threshold)."""
    notices: list[str] = field(default_factory=list)
    """Filled with what the user must be told (a failed attempt)."""
    usage: Usage = field(default_factory=Usage)
    """What the flush and summary calls spent (even a failed attempt's): the run counts it."""
    context_window_tokens: int | None = None
    """The window of the model this run uses (agent_core.models); None: the config's."""
    repaired: list[dict[str, Any]] | None = None
    """`transcript.repair(stored)` when the caller has it already (repair is deterministic):
    the history sent when nothing is compacted yet, without repairing the epoch twice."""


def estimate_tokens(*parts: Any) -> int:
    """chars/4 of the JSON of what is sent: a rough, model-independent estimate."""
    return sum(len(json.dumps(p, ensure_ascii=False)) for p in parts) // 4


def summary_message(summary: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": f"{SUMMARY_HEADER}\n\n{summary}"}]}


def normalise_summary(text: str) -> str:
    """The model's summary with every seed section present, in the seed's order (a section
    the model left out becomes '- none'; text outside the sections is kept under Active state)."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    stray: list[str] = []
    wanted = {s.lower(): s for s in SECTIONS}
    for line in text.splitlines():
        head = re.match(r"^\s*(?:#+\s*|\*\*)?([A-Za-z ]+?)(?:\*\*)?\s*:?\s*$", line)
        name = wanted.get(head.group(1).strip().lower()) if head else None
        if name is not None:
            current = name
            found.setdefault(name, [])
        elif line.strip():
            (found[current] if current else stray).append(line.rstrip())
    if stray:
        found.setdefault("Active state", []).extend(stray)
    return "\n\n".join(f"## {s}\n" + ("\n".join(found.get(s) or []) or "- none") for s in SECTIONS)


def render(messages: list[dict[str, Any]], max_chars: int) -> str:
    """Older turns as plain text for the summary call (no tool pairs to keep valid); long tool
    results are cut in the middle so the whole stays within `max_chars`."""
    lines: list[str] = []
    for message in messages:
        who = "User" if message["role"] == "user" else "Assistant"
        for block in message["content"]:
            kind = block.get("type")
            if kind == "text":
                lines.append(f"{who}: {block['text']}")
            elif kind == "tool_use":
                lines.append(f"Assistant called {block.get('name')}({json.dumps(block.get('input'), ensure_ascii=False)})")
            elif kind == "tool_result":
                body = block.get("content")
                text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
                lines.append(f"Tool result{' (error)' if block.get('is_error') else ''}: {text}")
            else:
                lines.append(f"{who}: [{kind}]")
    per_line = max(400, max_chars // max(1, len(lines)))
    out = [line if len(line) <= per_line else f"{line[: per_line // 2]} […] {line[-per_line // 4 :]}" for line in lines]
    return "\n".join(out)[-max_chars:]


def cut_index(stored: list[dict[str, Any]], keep_chars: int, floor: int) -> int | None:
    """The first stored message kept verbatim: the earliest user message without tool_result
    (a turn's start) such that it and everything after fit `keep_chars`, or the newest start
    when even that does not fit. None when no start lies after `floor` (nothing new to cover)."""
    starts = [
        i for i, m in enumerate(stored)
        if i > floor and m["role"] == "user" and not any(b.get("type") == "tool_result" for b in _blocks(m))
    ]  # fmt: skip
    if not starts:
        return None
    chosen = starts[-1]
    for start in reversed(starts):
        if size_of(stored[start:]) > keep_chars:
            break
        chosen = start
    return chosen


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


class Compactor:
    """Decides when to compact and does it; one instance serves every session."""

    def __init__(self, llm: LLMClient, store: CompactionStore, config: CompactionConfig = CompactionConfig()) -> None:
        self._llm = llm
        self._store = store
        self.config = config
        self._forced: set[str] = set()
        # Per session: real prompt tokens / our chars-4 estimate, from the first model call of
        # the last run (its usage counts the whole prompt); the estimate is scaled by it.
        self._ratio: OrderedDict[str, float] = OrderedDict()
        self._pending: dict[str, int] = {}
        self._tools_size: tuple[object, int] = (None, 0)

    def observe(self, session_key: str, usage: Usage) -> None:
        """The first model call of a run answered: calibrate this session's estimate with the
        real prompt size (input + cache reads + cache writes)."""
        estimate = self._pending.pop(session_key, 0)
        real = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        if estimate > 0 and real > 0:
            self._ratio[session_key] = min(4.0, max(0.25, real / estimate))
            self._ratio.move_to_end(session_key)
            while len(self._ratio) > _RATIOS_KEPT:
                self._ratio.popitem(last=False)

    def force(self, session_key: str) -> None:
        """/compact: the session's next run compacts whatever the size."""
        self._forced.add(session_key)

    def is_forced(self, session_key: str) -> bool:
        return session_key in self._forced

    async def prepare(self, call: CompactionCall) -> list[dict[str, Any]]:
        """The conversation to send for this run (before its own message): the latest summary
        plus the messages after what it covers, compacting first when due. Repaired."""
        latest, attempt = await self._store.compaction_state(call.session_key)
        if latest is not None and latest.covered > len(call.stored):
            latest = None  # stale (cannot happen within one epoch; be safe)
        history = call.repaired if latest is None and call.repaired is not None else self._view(latest, call.stored)
        history_chars = size_of(history)  # what windowing measures; dumped once per run
        raw_tokens = (self._fixed_chars(call) + history_chars) // 4
        tokens = int(raw_tokens * self._ratio.get(call.session_key, 1.0))
        self._pending[call.session_key] = raw_tokens
        forced = call.session_key in self._forced
        threshold = self.config.window_for(call.context_window_tokens) * self.config.compact_at
        if not forced and call.session_key not in self._ratio and COUNT_BAND[0] <= tokens / threshold < COUNT_BAND[1]:
            # Uncalibrated and near the threshold, where a characters-per-token guess decides:
            # ask the service for the real count (count_tokens) and calibrate with it.
            real = await self._count(call, history)
            if real is not None and raw_tokens > 0:
                self._ratio[call.session_key] = min(4.0, max(0.25, real / raw_tokens))
                tokens = real
        near_window = (
            self.config.before_window and call.history_budget_chars is not None
            and history_chars > call.history_budget_chars * WINDOW_SHARE
        )  # fmt: skip
        window_tokens = self.config.window_for(call.context_window_tokens)
        if not forced and not self._due(tokens, attempt, near_window, window_tokens):
            return history
        self._forced.discard(call.session_key)
        floor = latest.covered - 1 if latest is not None else -1
        cut = cut_index(call.stored, self.config.keep_recent_tokens * 4, floor)
        if cut is None or cut <= (latest.covered if latest else 0):
            if forced:
                call.notices.append("Nothing to compact yet: the conversation is short enough.")
            return history
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self._flush(call, history)
                summary = await self._summarise(call, latest, cut)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — any failure keeps the raw turns
            reason = "it took too long" if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
            log.warning("compaction.failed", extra={"session": call.session_key, "error": reason})
            await self._store.save_compaction(
                CompactionRecord(call.session_key, cut, "", tokens, tokens, False, reason[:500], forced)
            )
            call.notices.append(
                f"I couldn't compact the conversation: {reason}; older messages are left out instead."
            )
            return history
        compacted = [summary_message(summary), *call.stored[cut:]]
        new_history = repair(compacted)
        raw_after = (self._fixed_chars(call) + size_of(new_history)) // 4
        self._pending[call.session_key] = raw_after
        after = int(raw_after * self._ratio.get(call.session_key, 1.0))
        await self._store.save_compaction(CompactionRecord(call.session_key, cut, summary, tokens, after, True, "", forced))
        log.info("compaction.done", extra={"session": call.session_key, "before": tokens, "after": after})
        return new_history

    async def _count(self, call: CompactionCall, history: list[dict[str, Any]]) -> int | None:
        count = getattr(self._llm, "count_tokens", None)
        if count is None:
            return None
        request = LLMRequest(call.model, call.system, call.tools, repair([*history, {"role": "user", "content": call.incoming}]))
        try:
            async with asyncio.timeout(10):
                return int(await count(request))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 — the estimate stands; counting is a refinement
            log.info("compaction.count_failed", extra={"session": call.session_key, "error": type(exc).__name__})
            return None

    def _fixed_chars(self, call: CompactionCall) -> int:
        """Characters of system, tools and this run's message; the tool list is the loop's
        cached one, so its size is computed once per tool set."""
        if self._tools_size[0] is not call.tools:
            self._tools_size = (call.tools, len(json.dumps(call.tools, ensure_ascii=False)))
        return self._tools_size[1] + len(json_text([call.system, call.incoming]))

    def _due(
        self, tokens: int, attempt: CompactionRecord | None, near_window: bool = False, window_tokens: int | None = None
    ) -> bool:
        window_tokens = window_tokens or self.config.window_for(None)
        threshold = int(window_tokens * self.config.compact_at)
        if tokens < threshold and not near_window:
            return False
        stuck = attempt is not None and (not attempt.ok or attempt.tokens_after >= threshold)
        if attempt is not None and stuck:
            # One attempt per crossing: after a failure (or a compaction that could not get
            # under the threshold) wait until the context has grown by `retry_growth` more.
            regrow = int(window_tokens * self.config.retry_growth)
            return tokens >= attempt.tokens_after + regrow  # a failed attempt's 'after' is its 'before'
        return True

    @staticmethod
    def _view(latest: CompactionRecord | None, stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if latest is None:
            return repair(stored)
        return repair([summary_message(latest.summary), *stored[latest.covered :]])

    async def _flush(self, call: CompactionCall, history: list[dict[str, Any]]) -> None:
        """The silent memory-flush turn(s): nothing of it is shown or stored in the transcript;
        only memory tools run."""
        if call.history_budget_chars is not None:
            # What the loop would send: a compaction that makes room for a smaller window
            # must not first send the whole history to that window.
            history = window(history, call.history_budget_chars)
        messages = repair([*history, {"role": "user", "content": [{"type": "text", "text": FLUSH_PROMPT}]}])
        for _ in range(self.config.flush_turns):
            done = await self._complete(LLMRequest(call.model, call.system, call.tools, messages, 1024), call)
            uses = [b for b in done.content if b.get("type") == "tool_use"]
            if not uses:
                return
            messages.append({"role": "assistant", "content": done.content})
            allowed = [b for b in uses if b.get("name") in MEMORY_TOOLS]
            results = {r["tool_use_id"]: r for r in (await call.run_tools(allowed) if allowed else [])}
            messages.append({
                "role": "user",
                "content": [
                    results.get(b["id"]) or {
                        "type": "tool_result", "tool_use_id": b["id"], "is_error": True,
                        "content": "Only memory tools run during the memory flush.",
                    }
                    for b in uses
                ],
            })  # fmt: skip

    async def _summarise(self, call: CompactionCall, latest: CompactionRecord | None, cut: int) -> str:
        start = latest.covered if latest is not None else 0
        older = render(call.stored[start:cut], self.config.max_summary_input_chars)
        previous = f"Summary of what came before:\n{latest.summary}\n\n" if latest is not None else ""
        prompt = f"{previous}Conversation to summarise:\n{older}\n\nWrite the structured summary now."
        request = LLMRequest(
            call.model, [{"type": "text", "text": SUMMARY_SYSTEM}], [],
            [{"role": "user", "content": [{"type": "text", "text": prompt}]}], self.config.summary_max_tokens,
        )  # fmt: skip
        done = await self._complete(request, call)
        text = "\n".join(b["text"] for b in done.content if b.get("type") == "text").strip()
        if not text:
            raise ValueError("the summary came back empty")
        return normalise_summary(text)

    async def _complete(self, request: LLMRequest, call: CompactionCall) -> MessageComplete:
        done: MessageComplete | None = None
        async for item in self._llm.stream(request):
            if isinstance(item, MessageComplete):
                done = item
        if done is None:
            raise ValueError("the model sent no answer")
        call.usage = call.usage + done.usage
        return done


def describe(
    latest: CompactionRecord | None, attempt: CompactionRecord | None, stored: list[dict[str, Any]] | None = None
) -> list[str]:
    """/status lines about compaction; with the stored transcript, also what is sent now."""
    lines = []
    if latest is not None and stored is not None and latest.covered <= len(stored):
        view = repair([summary_message(latest.summary), *stored[latest.covered :]])
        lines.append(
            f"Context sent now: summary + {len(stored) - latest.covered} newer messages, "
            f"≈ {estimate_tokens(view):,} tokens of conversation"
        )
    if latest is not None:
        saved = 100 * (latest.tokens_before - latest.tokens_after) / max(1, latest.tokens_before)
        when = f" at {latest.created_at:%Y-%m-%d %H:%M} UTC" if latest.created_at else ""
        lines.append(
            f"Compacted{when}: ≈ {latest.tokens_before:,} → {latest.tokens_after:,} tokens "
            f"({saved:.0f} % fewer; {latest.covered} older messages summarised, all still stored)"
        )
    if attempt is not None and not attempt.ok:
        lines.append(f"Last compaction failed: {attempt.error} (older messages are left out instead)")
    return lines
