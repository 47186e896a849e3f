"""Keeps a conversation valid for the Messages API, whatever happened while it was written.

`repair` is applied to every transcript loaded from storage, so a crash between a `tool_use`
and its `tool_result`, a cancelled run, or a hand-edited database never yields a request the
API rejects.
"""

from __future__ import annotations

import json
from typing import Any

INTERRUPTED_RESULT = "No result: the run was interrupted before this tool finished."


def merge_consecutive(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive messages of the same role (queued user messages, notices)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        content = _blocks(message.get("content"))
        if not content:
            continue
        # Fresh message dicts and content lists; blocks are shared, never mutated in place.
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(content)
        else:
            merged.append({"role": message["role"], "content": list(content)})
    return merged


def repair(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return a copy where every tool_use has its tool_result right after it, no tool_result
    is an orphan, tool results lead their message, and the conversation starts with the user."""
    merged = merge_consecutive(messages)
    while merged and merged[0]["role"] != "user":
        merged.pop(0)
    out: list[dict[str, Any]] = []
    for index, message in enumerate(merged):
        if message["role"] == "user":
            previous = out[-1] if out and out[-1]["role"] == "assistant" else None
            wanted = _tool_use_ids(previous) if previous else []
            results = [b for b in message["content"] if b.get("type") == "tool_result"]
            others = [b for b in message["content"] if b.get("type") != "tool_result"]
            kept = [b for b in results if b.get("tool_use_id") in wanted]
            kept = _dedupe_results(kept)
            have = {b["tool_use_id"] for b in kept}
            kept += [_interrupted(i) for i in wanted if i not in have]
            content = _order_like(kept, wanted) + others
            if content:
                out.append({"role": "user", "content": content})
        else:
            if out and out[-1]["role"] == "assistant":
                out[-1]["content"].extend(message["content"])
            else:
                out.append(message)
            following = merged[index + 1] if index + 1 < len(merged) else None
            ids = _tool_use_ids(out[-1])
            if ids and (following is None or following["role"] != "user"):
                out.append({"role": "user", "content": [_interrupted(i) for i in ids]})
    # Dropping orphan results can leave an assistant message first; the API wants a user.
    while out and out[0]["role"] != "user":
        out = repair(out[1:])
    return out


def window(messages: list[dict[str, Any]], budget_chars: int) -> list[dict[str, Any]]:
    """The newest messages that fit the budget, starting at a user message that is not a
    tool result (so no tool_use loses its pair). Until compaction exists, this keeps a long
    session working instead of failing every request with "prompt is too long"."""
    total, start = 0, len(messages)
    for index in range(len(messages) - 1, -1, -1):
        total += len(json.dumps(messages[index]["content"], ensure_ascii=False))
        if total > budget_chars:
            break
        start = index
    while start < len(messages) and (
        messages[start]["role"] != "user"
        or any(b.get("type") == "tool_result" for b in messages[start]["content"])
    ):
        start += 1
    if start >= len(messages) and messages:
        return messages[-1:] if messages[-1]["role"] == "user" else []
    return messages[start:]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    if not isinstance(content, list):
        return []
    blocks = []
    for block in content:
        if not isinstance(block, dict):
            continue
        # Empty or whitespace-only text is rejected by the API (and would wedge the session).
        if block.get("type") == "text" and not str(block.get("text") or "").strip():
            continue
        blocks.append(block)
    return blocks


def _tool_use_ids(message: dict[str, Any] | None) -> list[str]:
    if message is None:
        return []
    return [b["id"] for b in message["content"] if b.get("type") == "tool_use"]


def _interrupted(tool_use_id: str) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": INTERRUPTED_RESULT,
        "is_error": True,
    }


def _dedupe_results(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for block in results:
        if block["tool_use_id"] not in seen:
            seen.add(block["tool_use_id"])
            out.append(block)
    return out


def _order_like(results: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    by_id = {b["tool_use_id"]: b for b in results}
    return [by_id[i] for i in ids if i in by_id]
