"""What the pages show, built from the operations' records: a run's timeline (every text
redacted, long outputs folded), usage chart bars. Plain data; the templates escape it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.storage.browse import RunTimeline
from bot.storage.metrics import MetricsTotals

FOLD_CHARS = 600
"""Outputs longer than this are shown folded (first part visible, the rest on demand)."""

Redact = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Item:
    kind: str
    """message | text | tool | approval | error | answer"""
    title: str
    body: str = ""
    more: str = ""
    """The folded rest of a long body."""
    meta: str = ""
    detail: str = ""
    """A tool's output."""
    detail_more: str = ""
    error: bool = False


@dataclass(frozen=True, slots=True)
class Timeline:
    items: list[Item] = field(default_factory=list)
    answer: str = ""


def _fold(text: str) -> tuple[str, str]:
    return (text, "") if len(text) <= FOLD_CHARS else (text[:FOLD_CHARS], text[FOLD_CHARS:])


def _text_of(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict):
        if block.get("type") == "text":
            return str(block.get("text", ""))
        if block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                return "\n".join(_text_of(b) for b in content)
            return str(content or "")
    return ""


def timeline(data: RunTimeline, redact: Redact) -> Timeline:
    calls = {c.call_id: c for c in data.tool_calls}
    approvals: dict[str, list[Any]] = {}
    for a in data.approvals:
        approvals.setdefault(a.call_id, []).append(a)
    items: list[Item] = []
    answer = ""
    shown_calls: set[str] = set()

    def tool_item(call_id: str, name: str, given: Any) -> None:
        call = calls.get(call_id)
        raw_input = call.input if call is not None else given
        shown_input = redact(json.dumps(raw_input, ensure_ascii=False, indent=1))
        body, more = _fold(shown_input)
        output = redact(call.output or "") if call is not None and call.output is not None else "(no output yet)"
        detail, detail_more = _fold(output)
        meta = ""
        if call is not None and call.duration_s is not None:
            meta = f"{call.duration_s:.2f} s"
        items.append(Item("tool", name, body, more, meta, detail, detail_more, bool(call and call.is_error)))
        shown_calls.add(call_id)
        for a in approvals.get(call_id, []):
            who = f" by {a.resolved_by}" if a.resolved_by else ""
            items.append(Item("approval", f"Approval: {a.state}{who}", redact(a.action)))

    for message in data.messages:
        for block in message.content:
            if message.role == "user":
                text = _text_of(block) if not (isinstance(block, dict) and block.get("type") == "tool_result") else ""
                if text:
                    body, more = _fold(redact(text))
                    items.append(Item("message", "Message", body, more))
            elif isinstance(block, dict) and block.get("type") == "tool_use":
                tool_item(str(block.get("id", "")), str(block.get("name", "tool")), block.get("input", {}))
            else:
                text = _text_of(block)
                if text:
                    answer = redact(text)
                    body, more = _fold(answer)
                    items.append(Item("text", "Model", body, more))
    for call in data.tool_calls:  # calls whose message was not stored (a cut-off run)
        if call.call_id not in shown_calls:
            tool_item(call.call_id, call.name, call.input)
    run = data.run
    if run.status not in ("finished", "running"):
        items.append(Item("error", f"Run {run.status}", redact(run.stop_reason or ""), error=True))
    return Timeline(items, answer)


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    width: float
    """0..100, of the chart's width."""
    text: str


def bars(rows: Sequence[tuple[str, float]], fmt: Callable[[float], str]) -> list[Bar]:
    top = max((v for _, v in rows), default=0) or 1
    return [Bar(label, value, round(100 * value / top, 2), fmt(value)) for label, value in rows]


def tokens(t: MetricsTotals) -> int:
    return t.input_tokens + t.output_tokens
