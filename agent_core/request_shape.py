"""How a turn's request is shaped and sized: the history budget a model's window allows, a
smaller budget when the service said the request was too long, the volatile system parts
laid after the conversation's cache breakpoint, and what the user is told when the service
refuses even the cut-down conversation. Pure functions of their arguments (`agent_core.loop`
calls them every turn)."""

from __future__ import annotations

from typing import Any

from agent_core.llm import LLMBadRequest
from agent_core.prompt import cache_layout

CHARS_PER_WINDOW_TOKEN = 2.4
"""History budget per token of window: at the ~4 characters a token of English text takes,
about 60 % of the window, leaving room for the system prompt, tools and the answer. Only the
windowing guard; when to compact is decided from real token counts (agent_core.compaction)."""


def history_budget(window_tokens: int, override_chars: int | None = None) -> int:
    """Characters of conversation sent per request for a model with this window."""
    if override_chars is not None:
        return override_chars
    return int(window_tokens * CHARS_PER_WINDOW_TOKEN)


def budget_within_limit(exc: LLMBadRequest, whole_chars: int, sent_chars: int, budget: int) -> int:
    """A history budget that should fit the model's limit: when the service gave its counts
    ("N tokens > M maximum"), cut the excess with a 20% margin at the request's own
    characters-per-token ratio; without counts, halve what was sent."""
    if exc.prompt_tokens and exc.max_tokens and exc.prompt_tokens > exc.max_tokens:
        chars_per_token = whole_chars / exc.prompt_tokens
        excess = (exc.prompt_tokens - exc.max_tokens) * chars_per_token * 1.2
        return max(0, min(budget, int(sent_chars - excess)))
    return min(budget, sent_chars // 2)


def rejected_message(exc: LLMBadRequest) -> str:
    if exc.too_long:
        return (
            "This conversation is too long for the model, even cut down to your latest message. "
            "Send /new to start over (a shorter message may help)."
        )
    detail = f" ({exc.detail})" if exc.detail else ""
    return (
        f"The model service rejected this conversation as invalid{detail}, and again after I "
        "cut it down to your latest message. Send /new to start over."
    )


def laid_out(
    system: list[dict[str, Any]], tools: list[dict[str, Any]], messages: list[dict[str, Any]], tail: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(system, tools, messages) as sent; with `tail`, the volatile system parts go after
    the conversation's cache breakpoint (agent_core.prompt.cache_layout)."""
    if not tail:
        return system, tools, messages
    sent_system, sent_messages = cache_layout(system, messages)
    return sent_system, tools, sent_messages
