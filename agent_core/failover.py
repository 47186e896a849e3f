"""`FailoverLLM`: an LLMClient that retries a failing model with backoff, skips models whose
circuit breaker is open, falls back to the configured models in order, and keeps the user's
view whole when a stream breaks after text was shown.

Per model, in order (the requested one first, then each fallback once):

1. No permit from its breaker (open, or another caller is probing) → next model.
2. Stream it. Text chunks pass through as they come. A retryable failure (429, 529, 5xx,
   dropped, stalled or truncated stream) counts on the breaker; it is retried after
   `RetryPolicy.delay` (exponential backoff with jitter, never before retry-after) unless the
   retries are spent, the breaker opened, or the wait would exceed `wait_for_fallback_s` while
   another model is left — then the next model. Too slow to a first item
   (`slow_first_token_s`, only while another model is left) → next model, not counted.
3. Any other error (auth, a rejected request) propagates at once.

A retry after text was shown continues that text: the shown text (trailing whitespace
removed, as the API requires) is sent as a prefill of the assistant turn, so the model carries
on from where the user's view is; the retried stream's output is appended, and the merged text
block is what the MessageComplete reports, so the stored transcript holds exactly what the user
saw. When a model other than the requested one gave the final answer, a short note saying so
ends the visible text (it is not part of the stored content).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent_core.breaker import Breakers, Permit
from agent_core.llm import (
    LLMClient,
    LLMError,
    LLMExhausted,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequest,
    LLMSlow,
    LLMStalled,
    LLMTruncated,
    MessageComplete,
    StreamItem,
    TextChunk,
)
from agent_core.retry import RetryPolicy

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class FailoverLLM:
    """See the module docstring. `breakers` is the process's shared set (None: no breakers);
    `sleep` and `rand` are injected so tests never wait real seconds."""

    def __init__(
        self,
        inner: LLMClient,
        fallback_models: Sequence[str] = (),
        *,
        retry: RetryPolicy = RetryPolicy(),
        breakers: Breakers | None = None,
        slow_first_token_s: float | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._inner = inner
        self._fallbacks = list(fallback_models)
        self._retry = retry
        self._breakers = breakers
        self._slow_s = slow_first_token_s
        self._sleep = sleep
        self._rand = rand

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        models = [request.model, *[m for m in self._fallbacks if m != request.model]]
        view = _View()
        tried: list[tuple[str, LLMError]] = []
        for position, model in enumerate(models):
            has_next = position < len(models) - 1
            retries = 0
            while True:
                permit = self._permit(model)
                if permit is None:
                    tried.append((model, _open_error(self._breakers, model)))
                    view.errors[model] = tried[-1][1]
                    break
                try:
                    async for item in self._attempt(request, model, view, has_next):
                        yield item
                    permit.success()
                    return
                except LLMSlow as exc:
                    log.warning("llm.slow_first_token", extra={"model": model})
                    tried.append((model, exc))
                    view.errors[model] = exc
                    break
                except LLMError as exc:
                    if not exc.retryable_elsewhere:
                        raise
                    permit.failure(_reason(exc))
                    tried.append((model, exc))
                    view.errors[model] = exc
                    retries += 1
                    wait = self._retry.delay(retries, exc, self._rand)
                    if (
                        retries > self._retry.max_retries
                        or (self._breakers is not None and self._breakers.for_model(model).state != "closed")
                        or (has_next and wait > self._retry.wait_for_fallback_s)
                    ):
                        log.warning("llm.fallback", extra={"from_model": model, "error": type(exc).__name__})
                        break
                    log.info("llm.retry", extra={"model": model, "retry": retries, "wait_s": round(wait, 2)})
                    await self._sleep(wait)
                finally:
                    permit.release()
        raise _exhausted(tried)

    def _permit(self, model: str) -> Permit | None:
        if self._breakers is None:
            return _NO_BREAKER
        return self._breakers.for_model(model).acquire()

    async def _attempt(
        self, request: LLMRequest, model: str, view: _View, has_next: bool
    ) -> AsyncIterator[StreamItem]:
        base = view.shown
        prefill = base.rstrip()
        messages = request.messages
        if prefill:
            messages = [*messages, {"role": "assistant", "content": [{"type": "text", "text": prefill}]}]
        # Whitespace the user already saw (not sent: the API refuses it at the end of a
        # prefill) is not shown twice when the continuation starts with its own.
        skip_ws = bool(prefill) and prefill != base
        attempt = LLMRequest(model, request.system, request.tools, messages, request.max_tokens)
        limit = self._slow_s if has_next else None
        items = self._inner.stream(attempt).__aiter__()
        first = True
        try:
            while True:
                try:
                    item = await _next(items, limit if first else None, model)
                except StopAsyncIteration:
                    return
                first = False
                if isinstance(item, TextChunk):
                    text = item.text.lstrip() if skip_ws else item.text
                    skip_ws = skip_ws and not text
                    if text:
                        view.shown += text
                        yield TextChunk(text)
                    continue
                done = _merged(item, base, skip_ws=prefill != base) if prefill else item
                if model != request.model and _is_final(done):
                    yield TextChunk(_note(model, request.model, view.last_error_of(request.model)))
                yield done
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()


@dataclass
class _View:
    shown: str = ""
    """Text the user has seen during this call, across attempts."""
    errors: dict[str, LLMError] = field(default_factory=dict)

    def last_error_of(self, model: str) -> LLMError | None:
        return self.errors.get(model)


class _NoBreaker(Permit):
    def __init__(self) -> None:
        pass

    def success(self) -> None:
        pass

    def failure(self, error: str) -> None:
        pass

    def release(self) -> None:
        pass


_NO_BREAKER = _NoBreaker()


async def _next(items: AsyncIterator[StreamItem], limit: float | None, model: str) -> StreamItem:
    # The deadline covers only the wait for the next item, never the consumer's time between
    # items (a timeout spanning a yield would cancel whatever the consumer awaits).
    if limit is None:
        return await anext(items)
    scope = asyncio.timeout(limit)
    try:
        async with scope:
            return await anext(items)
    except TimeoutError:
        if not scope.expired():  # not our deadline: someone else's timeout, not slowness
            raise
        raise LLMSlow(f"{model} took over {limit:g} s to start answering.") from None


def _merged(done: MessageComplete, base: str, *, skip_ws: bool) -> MessageComplete:
    """The continuation's content with the text shown before it as the start of its first
    text block, so what is stored is what the user saw."""
    content: list[dict[str, Any]] = [dict(b) for b in done.content]
    malformed = list(done.malformed)
    if content and content[0].get("type") == "text":
        rest = content[0].get("text", "")
        content[0]["text"] = base + (rest.lstrip() if skip_ws else rest)
    elif base.strip():
        content.insert(0, {"type": "text", "text": base})
        malformed = [
            replace(m, block_index=m.block_index + 1) if m.block_index is not None else m for m in malformed
        ]
    return replace(done, content=content, malformed=malformed)


def _is_final(done: MessageComplete) -> bool:
    return bool(done.content) and not any(b.get("type") == "tool_use" for b in done.content)


def _reason(exc: LLMError) -> str:
    if isinstance(exc, LLMRateLimited):
        return "rate limited"
    if isinstance(exc, LLMOverloaded):
        return "overloaded"
    if isinstance(exc, LLMStalled):
        return "stalled"
    if isinstance(exc, LLMTruncated):
        return "cut off"
    if isinstance(exc, LLMSlow):
        return "slow to answer"
    if isinstance(exc, LLMExhausted):
        return "paused after repeated failures"
    return "unavailable"


_NOTE = re.compile(r"\n\n\(answered by [^\n]*\)\Z")


def without_fallback_note(text: str) -> str:
    """The visible answer without the fallback note ending it (e.g. so a heartbeat's
    "nothing to report" is still recognised when a fallback model said it)."""
    return _NOTE.sub("", text)


def _note(used: str, requested: str, error: LLMError | None) -> str:
    if isinstance(error, LLMExhausted):
        why = "is paused after repeated failures"
    else:
        why = f"was {_reason(error)}" if error is not None else "was unavailable"
    return f"\n\n(answered by {used}: {requested} {why})"


def _open_error(breakers: Breakers | None, model: str) -> LLMError:
    status = breakers.for_model(model).status() if breakers is not None else None
    when = f"; next try in {status.retry_in_s:.0f} s" if status and status.retry_in_s is not None else ""
    return LLMExhausted(f"{model} is paused after repeated failures{when}.")


def _exhausted(tried: list[tuple[str, LLMError]]) -> LLMError:
    if len(tried) == 1 and not isinstance(tried[0][1], LLMExhausted):
        return tried[0][1]  # one attempt, nothing to add to its own message
    by_model: dict[str, LLMError] = {}
    for model, exc in tried:
        by_model[model] = exc
    parts = []
    for model, exc in by_model.items():
        attempts = sum(1 for m, _ in tried if m == model)
        if isinstance(exc, LLMExhausted):
            parts.append(str(exc).rstrip("."))
        else:
            times = f", {attempts} attempts" if attempts > 1 else ""
            parts.append(f"{model} {_reason(exc)}{times}")
    first = tried[-1][1] if tried else None
    lead = str(first) if first is not None and not isinstance(first, LLMExhausted) else "No model could answer."
    return LLMExhausted(f"{lead} Tried: {'; '.join(parts)}. Please try again in a minute.")
