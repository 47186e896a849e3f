"""Thinking blocks as strict as the service: a block sent back must be exactly the one served
(its signature vouches for its text), and within a tool loop the assistant turn whose tool
calls are being answered must still start with the thinking it was served with.

Error wording follows the service's: "Invalid `signature` in `thinking` block" and the
"Expected `thinking` or `redacted_thinking`" message for a dropped block.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from tests.fakes.anthropic_script import Reply, Thinking, ToolUse, RawToolUse
from tests.fakes.anthropic_validation import invalid


class ThinkingLedger:
    """What the fake signed, and which tool calls were made after thinking. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._signed: dict[str, str] = {}  # signature (or redacted data) -> thinking text
        self._thought_tools: set[str] = set()

    def clear(self) -> None:
        with self._lock:
            self._signed.clear()
            self._thought_tools.clear()

    def served(self, reply: Reply) -> None:
        """Remember a reply's thinking (its ids already assigned by ``with_ids``)."""
        thinking = [b for b in reply.blocks if isinstance(b, Thinking)]
        if not thinking:
            return
        with self._lock:
            for block in thinking:
                assert block.signature is not None
                self._signed[block.signature] = "" if block.redacted else block.text
            self._thought_tools.update(b.id for b in reply.blocks if isinstance(b, ToolUse | RawToolUse) and b.id)

    def check(self, body: Mapping[str, Any]) -> None:
        messages = body.get("messages") or []
        with self._lock:
            signed, thought = dict(self._signed), set(self._thought_tools)
        for i, message in enumerate(messages):
            content = message.get("content")
            if message.get("role") != "assistant" or not isinstance(content, list):
                continue
            for j, block in enumerate(content):
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "thinking":
                    if signed.get(block.get("signature", "")) != block.get("thinking"):
                        raise invalid(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
                elif kind == "redacted_thinking" and block.get("data") not in signed:
                    raise invalid(f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block")
        if not _thinking_on(body) or len(messages) < 2:
            return
        # The tool loop in progress: the last assistant turn's calls answered by the last user turn.
        last_user = messages[-1]
        answered = {
            b.get("tool_use_id") for b in (last_user.get("content") or []) if isinstance(b, dict)
            and b.get("type") == "tool_result"
        }  # fmt: skip
        if last_user.get("role") != "user" or not answered & thought:
            return
        i = len(messages) - 2
        while i > 0 and messages[i - 1].get("role") == "assistant":
            i -= 1  # consecutive assistant messages merge: the turn starts at the first
        first = (messages[i].get("content") or [{}])[0]
        kind = first.get("type") if isinstance(first, dict) else None
        if kind not in ("thinking", "redacted_thinking"):
            raise invalid(
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{kind}`. "
                "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
                "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
                "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
                "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            )


def _thinking_on(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
