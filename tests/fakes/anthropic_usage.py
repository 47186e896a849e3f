"""Token counting and a prompt-cache simulation for the fake Messages API.

Tokens are ``ceil(weight / 4)`` of canonical JSON, where ASCII characters weigh 1 and any
other character 4 (a token each, near what real tokenizers do for CJK text). The prompt is a sequence of *units* in
the service's caching order — each tool, then each system block, then each message content
block — and ``cache_control`` marks a breakpoint after a unit (top-level ``cache_control``
marks the last unit).

Like the real service: a request reads the longest prefix, ending at a breakpoint or at any of
the ``LOOKBACK_UNITS`` units before one, that an earlier request wrote; it writes the prefix
up to its last breakpoint. So ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens`` is the whole prompt, and a repeated prefix shows up as a read.
``cache_control`` markers themselves are not part of the cached content, so moving a
breakpoint forward along a growing conversation still hits the earlier prefix.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOOKBACK_UNITS = 20


def tokens(chars: int) -> int:
    return math.ceil(chars / 4)


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class PromptUsage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


def prompt_units(body: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """``(canonical JSON without cache_control, is_breakpoint)`` per unit, in caching order."""
    units: list[tuple[str, bool]] = []

    def add(kind: str, block: Mapping[str, Any], role: str | None = None) -> None:
        stripped = {k: v for k, v in block.items() if k != "cache_control"}
        units.append(
            (
                canonical({"kind": kind, "role": role, "block": stripped}),
                block.get("cache_control") is not None,
            )
        )

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            add("message", block, message.get("role"))
    if body.get("cache_control") is not None and units:
        units[-1] = (units[-1][0], True)
    return units


def weight(unit: str) -> int:
    """Characters as the fake's tokenizer weighs them: ASCII at 4 a token, anything else (CJK,
    emoji) a token each, as real tokenizers come close to — so a characters-per-token guess
    is wrong for such text, as it is against the real service."""
    return len(unit) + 3 * sum(1 for c in unit if ord(c) > 127)


def count_tokens(body: Mapping[str, Any]) -> int:
    return tokens(sum(weight(unit) for unit, _ in prompt_units(body)))


class PromptCache:
    """Remembers written prefixes for the fake's lifetime (no TTL). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: set[str] = set()

    def clear(self) -> None:
        with self._lock:
            self._written.clear()

    def account(self, body: Mapping[str, Any]) -> PromptUsage:
        """Usage for serving ``body``; records its cache write. Call only for served answers."""
        units = prompt_units(body)
        running = hashlib.sha256(canonical(body.get("model")).encode())
        digests: list[str] = []
        ends: list[int] = []  # characters up to and including unit i
        chars = 0
        for unit, _ in units:
            running.update(b"\x1e" + unit.encode())
            digests.append(running.copy().hexdigest())
            chars += weight(unit)
            ends.append(chars)
        total = tokens(chars)
        breakpoints = [i for i, (_, marked) in enumerate(units) if marked]
        if not breakpoints:
            return PromptUsage(
                input_tokens=total, cache_creation_input_tokens=0, cache_read_input_tokens=0
            )
        candidates = sorted(
            {i for bp in breakpoints for i in range(max(0, bp - LOOKBACK_UNITS + 1), bp + 1)},
            reverse=True,
        )
        with self._lock:
            hit = next((i for i in candidates if digests[i] in self._written), None)
            self._written.update(digests[bp] for bp in breakpoints)
        cached = tokens(ends[breakpoints[-1]])
        read = tokens(ends[hit]) if hit is not None else 0
        # A hit beyond the last breakpoint cannot happen: candidates end at breakpoints.
        return PromptUsage(
            input_tokens=total - cached,
            cache_creation_input_tokens=cached - read,
            cache_read_input_tokens=read,
        )
