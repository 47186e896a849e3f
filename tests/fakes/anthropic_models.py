"""What the fake Messages API knows about each model: window, output limit, prefill,
temperature, thinking — and the rules today's service enforces from them.

The ids are the ones SDK 2.14 lists (``anthropic.types.ModelParam``). The limits are the
fake's, chosen to exercise Roost's per-model handling (one family with a 1M window, older ones
that still accept prefill); they are not a statement about the real service's numbers. A model
id the table does not know is served without limits, as before, unless ``strict_models`` is on
(then it gets the real 404 ``not_found_error`` "model: <id>").

Error wording: the prefill refusal is the service's own message (quoted in the issue and the
SDK's docs link to it); the others follow the service's ``<path>: <problem>`` style.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakes.anthropic_validation import ApiError, invalid

PREFILL_REFUSED = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)
# A trailing assistant turn that ends in a server tool's blocks is how a paused turn
# (stop_reason "pause_turn") is continued, not a prefill.
_CONTINUABLE_TAIL = ("server_tool_use", "web_search_tool_result")


@dataclass(frozen=True, slots=True)
class FakeModel:
    id: str
    display_name: str
    context_window: int = 200_000
    max_output_tokens: int = 64_000
    prefill: bool = False
    temperature: bool = True
    thinking: bool = True
    created_at: str = "2026-01-01T00:00:00Z"

    def info(self) -> dict[str, Any]:
        """The ``GET /v1/models`` entry (``anthropic.types.ModelInfo``)."""
        return {
            "type": "model",
            "id": self.id,
            "display_name": self.display_name,
            "created_at": self.created_at,
            "lifecycle": "active",
            "max_input_tokens": self.context_window,
            "max_tokens": self.max_output_tokens,
        }


def _family(ids: tuple[str, ...], name: str, **facts: Any) -> dict[str, FakeModel]:
    return {i: FakeModel(i, name, **facts) for i in ids}


DEFAULT_MODELS: dict[str, FakeModel] = {
    **_family(("claude-sonnet-5-5",), "Claude Sonnet 5.5", context_window=1_000_000, temperature=False,
              created_at="2026-09-01T00:00:00Z"),
    **_family(("claude-opus-5-5",), "Claude Opus 5.5", context_window=1_000_000, max_output_tokens=32_000,
              temperature=False, created_at="2026-09-01T00:00:00Z"),
    **_family(("claude-haiku-5-5",), "Claude Haiku 5.5", temperature=False, created_at="2026-09-01T00:00:00Z"),
    **_family(("claude-sonnet-4-6",), "Claude Sonnet 4.6", context_window=1_000_000,
              created_at="2026-02-01T00:00:00Z"),
    **_family(("claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8"), "Claude Opus 4.x",
              max_output_tokens=32_000, created_at="2026-02-01T00:00:00Z"),
    **_family(("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"), "Claude Sonnet 4.5", prefill=True,
              created_at="2025-09-29T00:00:00Z"),
    **_family(("claude-haiku-4-5", "claude-haiku-4-5-20251001"), "Claude Haiku 4.5", prefill=True,
              created_at="2025-10-01T00:00:00Z"),
    **_family(("claude-opus-4-5", "claude-opus-4-5-20251101"), "Claude Opus 4.5", prefill=True,
              max_output_tokens=32_000, created_at="2025-11-01T00:00:00Z"),
}


def check_for_model(body: Mapping[str, Any], model: FakeModel, *, prompt_tokens: int) -> None:
    """Raise ``ApiError`` for what ``model`` refuses in an otherwise valid messages request."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if not model.prefill and last.get("role") == "assistant":
        content = last.get("content")
        tail = content[-1] if isinstance(content, list) and content else None
        if not (isinstance(tail, dict) and tail.get("type") in _CONTINUABLE_TAIL):
            raise invalid(PREFILL_REFUSED)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens > model.max_output_tokens:
        raise invalid(
            f"max_tokens: {max_tokens} > {model.max_output_tokens}, which is the maximum allowed "
            f"number of output tokens for {model.id}"
        )
    if "temperature" in body and not model.temperature:
        raise invalid(f"temperature: This parameter is not supported by {model.id}.")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") != "disabled" and not model.thinking:
        raise invalid(f"thinking: {model.id} does not support thinking.")
    if prompt_tokens > model.context_window:
        raise invalid(f"prompt is too long: {prompt_tokens} tokens > {model.context_window} maximum")


def unknown_model(model_id: object) -> ApiError:
    return ApiError(404, "not_found_error", f"model: {model_id}")
