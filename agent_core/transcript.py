"""Keeps a conversation valid for the Messages API, whatever happened while it was written.

`repair` is applied to every transcript loaded from storage, so a crash between a `tool_use`
and its `tool_result`, a cancelled run, duplicate tool ids from the model, or a hand-edited
database never yields a request the API rejects. `window` picks what of a long conversation is
sent, never separating a `tool_use` from its `tool_result`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from agent_core.text import json_text

INTERRUPTED_RESULT = "No result: the run was interrupted before this tool finished."

MIN_RESULT_CHARS = 400
"""A tool result shrunk to fit the window keeps at least this much (plus the note)."""

_ID_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


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
    is an orphan, tool results lead their message, the conversation starts with the user, and
    every tool_use id is valid and unique in the whole conversation.

    A repeated id (the same id twice in one message, or reused by a later message: some
    Anthropic-compatible endpoints number ids per response) is renamed deterministically
    (`toolu_1` → `toolu_1_2`), and the k-th result naming it answers the k-th use. Idempotent.
    """
    merged = merge_consecutive(messages)
    while merged and merged[0]["role"] != "user":
        merged.pop(0)
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    pending: list[tuple[str, str]] = []  # (id the model gave, id as sent) awaiting results
    for index, message in enumerate(merged):
        if message["role"] == "user":
            results = [b for b in message["content"] if b.get("type") == "tool_result"]
            others = [b for b in message["content"] if b.get("type") != "tool_result"]
            content = _pair_results(results, pending) + others
            pending = []
            if content:
                out.append({"role": "user", "content": content})
        else:
            content, pairs = unique_tool_ids(message["content"], taken)
            if out and out[-1]["role"] == "assistant":
                out[-1]["content"].extend(content)
            else:
                out.append({"role": "assistant", "content": content})
            pending += pairs
            following = merged[index + 1] if index + 1 < len(merged) else None
            if pending and (following is None or following["role"] != "user"):
                out.append({"role": "user", "content": [_interrupted(new) for _, new in pending]})
                pending = []
    # Dropping orphan results can leave an assistant message first; the API wants a user.
    while out and out[0]["role"] != "user":
        out = repair(out[1:])
    return out


def unique_tool_ids(
    content: list[dict[str, Any]], taken: set[str]
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """An assistant message's content with each tool_use id made valid for the API and unused
    in `taken` (which is updated), plus (model's id, new id) per tool_use, in order.

    Deterministic: the first use of an id keeps it, later ones get `_2`, `_3`, …; characters
    the API refuses in ids become `_`. Blocks are copied, never mutated."""
    out: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []
    for block in content:
        if block.get("type") != "tool_use":
            out.append(block)
            continue
        original = str(block.get("id") or "")
        base = _ID_BAD_CHARS.sub("_", original) or "toolu"
        new, n = base, 1
        while new in taken:
            n += 1
            new = f"{base}_{n}"
        taken.add(new)
        pairs.append((original, new))
        out.append(block if new == original else {**block, "id": new})
    return out, pairs


def tool_use_ids(messages: Iterable[dict[str, Any]]) -> set[str]:
    """Every tool_use id in `messages`."""
    return {
        b["id"]
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    }


def window(messages: list[dict[str, Any]], budget_chars: int) -> list[dict[str, Any]]:
    """What of a valid conversation (as `repair` returns it) is sent, within about
    `budget_chars` characters of content JSON. Until compaction exists, this keeps a long
    session working instead of failing every request with "prompt is too long".

    Invariants, whatever the sizes:

    - the result is valid: it starts at a user message that holds no tool_result, and a
      tool_use and its tool_result are sent together or not at all;
    - the newest such user message and everything after it are always sent; if they exceed
      the budget, their tool results are shrunk (largest first, each keeping at least
      `MIN_RESULT_CHARS`) with a note saying how much was cut — never dropped or orphaned;
    - older turns are added newest first while they fit whole; the next older turn that does
      not fit is added with its tool results shrunk when that fits the budget.

    Only the copy that is sent is shrunk; the stored transcript keeps every result whole.
    """
    if not messages:
        return []
    sizes = [_size(m["content"]) for m in messages]
    starts = [i for i, m in enumerate(messages) if _is_start(m)] or [0]
    start = starts[-1]
    total = sum(sizes[start:])
    if total > budget_chars:
        return _shrink(messages[start:], budget_chars)
    for earlier in reversed(starts[:-1]):
        segment = sum(sizes[earlier:start])
        if total + segment <= budget_chars:
            total += segment
            start = earlier
            continue
        shrunk = _shrink(messages[earlier:], budget_chars)
        if size_of(shrunk) <= budget_chars:
            return shrunk
        break
    return messages[start:]


def size_of(messages: list[dict[str, Any]]) -> int:
    """The measure `window` budgets: characters of each message's content as JSON."""
    return sum(_size(m["content"]) for m in messages)


def _size(value: Any) -> int:
    text = json_text(value)
    # Only a base64 source has an excess, and its JSON says so: the walk is skipped otherwise.
    return len(text) - (_media_excess(value) if '"base64"' in text else 0)


IMAGE_CHARS = 6_400
"""What an image block counts as: ~1,600 tokens (a 1568 px image), not its base64 length."""
PDF_CHARS_RATIO = 10
"""A PDF block counts a tenth of its base64 (~2,500 tokens per ~100 KB page)."""


def _media_excess(value: Any) -> int:
    """How much more than its token cost the base64 of media blocks in `value` measures: a
    photo's 150,000 characters must not push the conversation out of the window."""
    if isinstance(value, list):
        return sum(_media_excess(v) for v in value)
    if not isinstance(value, dict):
        return 0
    source = value.get("source")
    if value.get("type") in ("image", "document") and isinstance(source, dict) and source.get("type") == "base64":
        data = source.get("data")
        if isinstance(data, str):
            cost = IMAGE_CHARS if value["type"] == "image" else len(data) // PDF_CHARS_RATIO
            return max(0, len(data) - cost)
    content = value.get("content")
    return _media_excess(content) if isinstance(content, list) else 0


def _is_start(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and not any(
        b.get("type") == "tool_result" for b in message["content"]
    )


def _shrink(messages: list[dict[str, Any]], budget_chars: int) -> list[dict[str, Any]]:
    """`messages` with the text of their tool results cut so the whole fits the budget when it
    can: the largest results are cut first, to a common cap no lower than MIN_RESULT_CHARS."""
    texts = [
        _size(b["content"])
        for m in messages
        for b in m["content"]
        if b.get("type") == "tool_result" and isinstance(b.get("content"), str)
    ]
    if not texts:
        return messages
    fixed = size_of(messages) - sum(texts)
    cap = _water_level(texts, budget_chars - fixed)
    # JSON escapes make the cut approximate; tighten the cap until the whole fits (or cannot).
    for _ in range(8):
        out = [_cut_results(m, cap) for m in messages]
        if size_of(out) <= budget_chars or cap <= MIN_RESULT_CHARS:
            return out
        cap = max(MIN_RESULT_CHARS, int(cap * 0.8))
    return out


def _water_level(sizes: list[int], available: int) -> int:
    """The highest cap c with sum(min(s, c)) <= available, but at least MIN_RESULT_CHARS."""
    ordered = sorted(sizes)
    remaining, count = available, len(ordered)
    for index, size in enumerate(ordered):
        share = remaining // (count - index)
        if size > share:
            return max(MIN_RESULT_CHARS, share)
        remaining -= size
    return max(MIN_RESULT_CHARS, ordered[-1])


def _cut_results(message: dict[str, Any], cap: int) -> dict[str, Any]:
    if message["role"] != "user":
        return message
    content = []
    changed = False
    for block in message["content"]:
        text = block.get("content") if block.get("type") == "tool_result" else None
        if isinstance(text, str) and _size(text) > cap:
            block = {**block, "content": _cut_text(text, cap)}
            changed = True
        content.append(block)
    return {"role": message["role"], "content": content} if changed else message


def _cut_text(text: str, cap: int) -> str:
    json_size = _size(text)
    # Keep the same share of characters as of JSON size, minus room for the note.
    keep = max(0, int(len(text) * cap / json_size) - 160)
    head = keep * 2 // 3
    tail = keep - head
    cut = len(text) - head - tail
    note = (
        f"\n\n[… {cut} of {len(text)} characters of this result were cut here so the "
        "conversation fits the model's context window …]\n\n"
    )
    return text[:head] + note + (text[-tail:] if tail else "")


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


def _pair_results(
    results: list[dict[str, Any]], pending: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """One result per pending tool_use, in use order, named by the use's id as sent: a result
    naming the new id wins, else the next unused one naming the model's id; the rest (orphans,
    duplicates) are dropped and a missing one becomes an "interrupted" error result."""
    used: set[int] = set()
    out = []
    for original, new in pending:
        match = _first_unused(results, used, new)
        if match is None:
            match = _first_unused(results, used, original)
        if match is None:
            out.append(_interrupted(new))
            continue
        used.add(match)
        block = results[match]
        out.append(block if block["tool_use_id"] == new else {**block, "tool_use_id": new})
    return out


def _first_unused(results: list[dict[str, Any]], used: set[int], tool_use_id: str) -> int | None:
    for n, block in enumerate(results):
        if n not in used and block.get("tool_use_id") == tool_use_id:
            return n
    return None


def _interrupted(tool_use_id: str) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": INTERRUPTED_RESULT,
        "is_error": True,
    }
