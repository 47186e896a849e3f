"""The model client contract: request and stream values, and the error tree.

`agent_core.anthropic_llm` implements it over the anthropic SDK (the only module that imports
it, kept apart because importing the SDK costs ~2 s and ~70 MB); `agent_core.failover` wraps a
client with retries, circuit breakers and fallback models. Exceptions::

    LLMError                 message is safe to show a user
    ├── LLMRateLimited       429; retry_after when the service said
    ├── LLMOverloaded        529 / 503
    ├── LLMUnavailable       connection errors, timeouts, 5xx
    │   ├── LLMStalled       no stream event for the stall timeout
    │   ├── LLMTruncated     the stream ended without message_stop
    │   ├── LLMSlow          no first token within the latency limit (failover only)
    │   └── LLMExhausted     every attempt and fallback failed, or every breaker is open
    ├── LLMAuthError         401 / 403: the key is wrong
    └── LLMBadRequest        400: we sent something the API rejects
        └── LLMUnsupported   the model does not take a feature, parameter or value we sent
                             (prefill, temperature, thinking, a max_tokens above its limit),
                             or the model id is unknown (404): another model may answer

`retryable_elsewhere` marks the errors a retry or another model may well cure.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_core.events import Usage

log = logging.getLogger(__name__)


class LLMError(Exception):
    retryable_elsewhere = False
    """True when another model may well succeed (fallback)."""


class LLMRateLimited(LLMError):
    retryable_elsewhere = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMOverloaded(LLMError):
    retryable_elsewhere = True


class LLMUnavailable(LLMError):
    retryable_elsewhere = True


class LLMStalled(LLMUnavailable):
    pass


class LLMTruncated(LLMUnavailable):
    pass


class LLMSlow(LLMUnavailable):
    pass


class LLMExhausted(LLMUnavailable):
    """Raised by failover once nothing is left to try; the message names what was tried."""


class LLMAuthError(LLMError):
    pass


class LLMBadRequest(LLMError):
    """The service refused the request as invalid. `detail` is the service's own message;
    `too_long` is set for "prompt is too long", with the token counts when it gave them."""

    def __init__(
        self,
        message: str,
        *,
        detail: str = "",
        too_long: bool = False,
        prompt_tokens: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(message)
        self.detail = detail
        self.too_long = too_long
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens

    @property
    def concerns_conversation(self) -> bool:
        """Whether the service objected to the stored conversation (its messages, tool
        pairing, size) — the only rejections that repairing and trimming it can cure."""
        if self.too_long:
            return True
        detail = self.detail.lower()
        return detail.startswith("messages") or any(word in detail for word in _CONVERSATION_WORDS)


_CONVERSATION_WORDS = ("tool_use", "tool_result", "content block", "text content", "thinking` block")


class LLMUnsupported(LLMBadRequest):
    """The model refused a feature, parameter or value — not the conversation. `feature`
    names it ("prefill", "temperature", "thinking", "max_tokens", "model"); `limit` is the
    model's maximum when the service said (max_tokens)."""

    retryable_elsewhere = True

    def __init__(self, message: str, *, feature: str, detail: str = "", limit: int | None = None) -> None:
        super().__init__(message, detail=detail)
        self.feature = feature
        self.limit = limit

    @property
    def concerns_conversation(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class LLMRequest:
    model: str
    system: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    max_tokens: int = 4096
    thinking: dict[str, Any] | None = None
    """The `thinking` parameter (agent_core.models.thinking_param); None: not sent. Failover
    drops it for a model whose facts say it does not think."""
    fit: Callable[[int], Awaitable[LLMRequest]] | None = field(default=None, compare=False, repr=False)
    """Given by the loop: the same request shrunk to fit a window of that many tokens
    (compacting first), so failing over to a smaller-window model never sends what cannot fit."""


@dataclass(frozen=True, slots=True)
class TextChunk:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingChunk:
    """Reasoning as the model streams it: shown as a status, never part of the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class MalformedToolUse:
    call_id: str
    name: str
    raw_input: str
    problem: str
    block_index: int | None = None
    """Position of the tool_use in MessageComplete.content (ids alone may repeat)."""


@dataclass(frozen=True, slots=True)
class MessageComplete:
    content: list[dict[str, Any]]
    """Assistant content blocks as API dicts; malformed tool inputs are stored as {}; thinking
    blocks exactly as the service sent them (their signature vouches for them)."""
    stop_reason: str
    usage: Usage
    model: str
    malformed: list[MalformedToolUse] = field(default_factory=list)


StreamItem = TextChunk | ThinkingChunk | MessageComplete


class LLMClient(Protocol):
    def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        """Yield text chunks as they arrive, then exactly one MessageComplete; raise LLMError."""
        ...


class TokenCounter(Protocol):
    async def count_tokens(self, request: LLMRequest) -> int:
        """The request's prompt size in tokens, as the service counts it; raise LLMError."""
        ...


@dataclass(frozen=True, slots=True)
class ModelListing:
    """One entry of the service's model catalogue (GET /v1/models)."""

    id: str
    display_name: str = ""
    context_window: int | None = None
    max_output_tokens: int | None = None


class ModelCatalogue(Protocol):
    async def list_models(self) -> list[ModelListing]:
        """What the endpoint offers, newest first; raise LLMError."""
        ...

    async def model_info(self, model_id: str) -> ModelListing | None:
        """The endpoint's entry for `model_id`, None when it does not know it; raise LLMError
        (LLMAuthError for a rejected key)."""
        ...
