"""Extended thinking: what a request asks for, and keeping thinking blocks valid for the API.

`ROOST_AGENT__THINKING` is `off` (no `thinking` parameter at all), `adaptive` (the model
decides when and how much) or a token budget (manual, at least 1,024). The display is set
explicitly to `summarized`, since newer models omit the summarised reasoning by default: the
chat shows a "💭 thinking…" status while it arrives, never the reasoning in the answer.

Rules the API enforces, and how Roost keeps them:

- Thinking and redacted_thinking blocks carry a signature over their content; inside a tool
  loop the assistant turn must be sent back starting with them, byte for byte. They are
  stored as returned (agent_core.anthropic_llm keeps them whole, the loop stores the turn's
  blocks in order) and no code path edits an assistant message's blocks: `repair` and
  `window` move or drop whole messages only, compaction cuts only at a user message that
  holds no tool_result (so a turn's thinking never leaves its turn).
- A request without thinking must not end its tool loop on an assistant turn holding
  thinking, so without thinking every thinking block is dropped from what is sent
  (`without_thinking`): dropping a turn's thinking whole is always allowed for turns before
  the last user message, and with thinking off the API ignores it anyway.
- Thinking tokens count toward `max_tokens`, so the answer keeps its configured room: a budget
  is added to it, and adaptive thinking gets `ADAPTIVE_ROOM` more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

MIN_BUDGET = 1024
"""The API's smallest thinking budget."""
ADAPTIVE_ROOM = 16_000
"""Tokens of `max_tokens` added for adaptive thinking (Roost's choice: the model decides how
much it thinks, the answer keeps ROOST_AGENT__MAX_TOKENS of its own)."""
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})

Display = Literal["summarized", "omitted"]


@dataclass(frozen=True, slots=True)
class Thinking:
    """One request's thinking: `mode` off/adaptive/budget, `budget_tokens` for a budget."""

    mode: Literal["off", "adaptive", "budget"] = "off"
    budget_tokens: int = 0
    display: Display = "summarized"

    @classmethod
    def parse(cls, value: str | int) -> Thinking:
        """`off`, `adaptive` or a budget of at least MIN_BUDGET tokens; ValueError otherwise."""
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("off", "adaptive"):
                return cls(word)  # type: ignore[arg-type]
            try:
                value = int(word)
            except ValueError:
                raise ValueError(f"expected off, adaptive or a token budget (an integer ≥ {MIN_BUDGET}), got {value!r}") from None
        if isinstance(value, bool) or value < MIN_BUDGET:
            raise ValueError(f"a thinking budget must be an integer ≥ {MIN_BUDGET} tokens, got {value!r}")
        return cls("budget", value)

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def param(self) -> dict[str, Any] | None:
        """The request's `thinking` parameter (anthropic ThinkingConfigParam), or None: no
        parameter is sent at all."""
        if self.mode == "adaptive":
            return {"type": "adaptive", "display": self.display}
        if self.mode == "budget":
            return {"type": "enabled", "budget_tokens": self.budget_tokens, "display": self.display}
        return None

    def max_tokens(self, answer_tokens: int) -> int:
        """`max_tokens` to send so the answer keeps `answer_tokens` after the thinking."""
        if self.mode == "adaptive":
            return answer_tokens + ADAPTIVE_ROOM
        if self.mode == "budget":
            return answer_tokens + self.budget_tokens
        return answer_tokens


OFF = Thinking()


def without_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with every thinking and redacted_thinking block dropped whole (a fresh list;
    messages without any are passed as they are, so a cached prefix stays byte-identical).
    An assistant message left without content is dropped with them."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            out.append(message)
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        if len(kept) == len(content):
            out.append(message)
        elif kept:
            out.append({**message, "content": kept})
    return out


def has_thinking(content: list[dict[str, Any]]) -> bool:
    return any(isinstance(b, dict) and b.get("type") in THINKING_TYPES for b in content)
