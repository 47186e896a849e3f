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
3. A feature, parameter or model the model does not take (`LLMUnsupported`) → the next
   model at once, not counted on the breaker; when the model table said the model took it
   (prefill, thinking, a max_tokens limit), the table learns better and the same model is
   retried once.
4. Any other error (auth, a rejected conversation) propagates at once.

A retry after text was shown continues that text without a prefill unless the model table
says the model accepts one (agent_core.continuation): the shown text goes back as a finished
assistant turn plus a user turn asking to continue exactly after it; whatever the continuation
repeats of the shown text is dropped before it is shown, and the merged text block is what the
MessageComplete reports, so the stored transcript holds exactly what the user saw. An answer
that stops at `max_tokens` mid-text is continued the same way (`max_continuations`, once by
default). A refusal before any text, with another model left, goes to that model. When a model
other than the requested one gave the final answer, a short note saying so ends the visible
text (it is not part of the stored content). `max_tokens` is clamped to each model's limit;
`thinking` is sent only to models that think. Before a fallback with a smaller context window
than the requested model is tried, the prompt is counted (`count_tokens`) and, if it would not
fit, shrunk by the loop's `LLMRequest.fit` (compaction to that window) first.
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
    LLMUnsupported,
    MessageComplete,
    StreamItem,
    TextChunk,
    ThinkingChunk,
)
from agent_core.continuation import Joiner, continuation_messages
from agent_core.events import Usage
from agent_core.models import ModelTable
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
        facts: ModelTable | None = None,
        max_continuations: int = 1,
    ) -> None:
        self._facts = facts if facts is not None else ModelTable()
        self._max_continuations = max_continuations
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
            relearned = False
            request = await self._fitted(request, model)
            while True:
                permit = await self._permit(model)
                if permit is None:
                    tried.append((model, _open_error(self._breakers, model)))
                    view.errors[model] = tried[-1][1]
                    break
                try:
                    shown_before = view.shown
                    done: MessageComplete | None = None
                    async for item in self._attempt(request, model, view, has_next):
                        if isinstance(item, MessageComplete):
                            done = item
                        else:
                            yield item
                    await self._succeeded(permit)
                    assert done is not None, "LLMClient.stream must end with MessageComplete"
                    if _cut_by_limit(done) and view.continuations < self._max_continuations:
                        # max_tokens mid-answer: continued (bounded) like a broken stream.
                        log.info("llm.max_tokens_continued", extra={"model": model})
                        view.continuations += 1
                        view.usage = view.usage + done.usage
                        continue
                    if done.stop_reason == "refusal" and has_next and view.shown == shown_before:
                        # Declined before showing anything: the next configured model may answer.
                        log.warning("llm.refused", extra={"model": model})
                        tried.append((model, _REFUSED))
                        view.errors[model] = _REFUSED
                        break
                    done = replace(done, usage=view.usage + done.usage)
                    if model != request.model and _is_final(done):
                        yield TextChunk(_note(model, request.model, view.last_error_of(request.model)))
                    yield done
                    return
                except LLMSlow as exc:
                    log.warning("llm.slow_first_token", extra={"model": model})
                    tried.append((model, exc))
                    view.errors[model] = exc
                    break
                except LLMUnsupported as exc:
                    # Not the model's health: no breaker count, no backoff.
                    if not relearned and self._relearn(model, exc):
                        relearned = True
                        continue
                    log.warning("llm.unsupported", extra={"model": model, "feature": exc.feature})
                    tried.append((model, exc))
                    view.errors[model] = exc
                    break
                except LLMError as exc:
                    if not exc.retryable_elsewhere:
                        raise
                    await self._failed(permit, _reason(exc))
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
                    await self._release(permit)
        raise _exhausted(tried)

    async def count_tokens(self, request: LLMRequest) -> int:
        """The prompt's size as the service counts it (the inner client's count_tokens)."""
        count = getattr(self._inner, "count_tokens", None)
        if count is None:
            raise LLMError("This model client cannot count tokens.")
        return int(await count(request))

    async def _fitted(self, request: LLMRequest, model: str) -> LLMRequest:
        """`request` shrunk (compacted by the loop's `fit`) when `model` has a smaller window
        than the requested model and the prompt, counted by the service, would not fit it."""
        window = self._facts(model).context_window
        if model == request.model or request.fit is None or window >= self._facts(request.model).context_window:
            return request
        room = window - min(request.max_tokens, self._facts(model).max_output_tokens)
        count = getattr(self._inner, "count_tokens", None)
        if count is not None:
            try:
                if await count(replace(request, model=model)) <= room:
                    return request
            except LLMError as exc:  # cannot count: make room rather than send what may not fit
                log.info("llm.count_tokens_failed", extra={"model": model, "error": type(exc).__name__})
        log.info("llm.fit_smaller_window", extra={"from_model": request.model, "model": model, "window": window})
        return replace(await request.fit(room), fit=request.fit, thinking=request.thinking)

    def _relearn(self, model: str, exc: LLMUnsupported) -> bool:
        """A refusal the table should have foreseen: remember it and retry at once."""
        facts = self._facts(model)
        if exc.feature == "prefill" and facts.prefill:
            self._facts.learn(model, prefill=False)
            return True
        if exc.feature == "thinking" and facts.thinking:
            self._facts.learn(model, thinking=False)
            return True
        if exc.feature == "max_tokens" and exc.limit and exc.limit < facts.max_output_tokens:
            self._facts.learn(model, max_output_tokens=exc.limit)
            return True
        return False

    async def _permit(self, model: str) -> Permit | None:
        if self._breakers is None:
            return _NO_BREAKER
        return await self._breakers.acquire(model)

    async def _succeeded(self, permit: Permit) -> None:
        if self._breakers is not None and permit is not _NO_BREAKER:
            await self._breakers.succeeded(permit)

    async def _failed(self, permit: Permit, error: str) -> None:
        if self._breakers is not None and permit is not _NO_BREAKER:
            await self._breakers.failed(permit, error)

    async def _release(self, permit: Permit) -> None:
        if self._breakers is not None and permit is not _NO_BREAKER:
            await self._breakers.release(permit)

    async def _attempt(
        self, request: LLMRequest, model: str, view: _View, has_next: bool
    ) -> AsyncIterator[StreamItem]:
        """One try on `model`: text chunks as they come, then the MessageComplete with the
        text shown before this try (if any) as the start of its first text block."""
        base = view.shown
        facts = self._facts(model)
        # With thinking on, the service takes no prefill either: the user-turn way then.
        prefill = facts.prefill and not (request.thinking and facts.thinking)
        messages = continuation_messages(request.messages, base, prefill=prefill)
        joiner = Joiner(base)
        thinking = request.thinking if facts.thinking else None  # a parameter the model rejects is not sent
        budget = int(thinking.get("budget_tokens", 0)) if thinking else 0
        # A thinking budget counts toward max_tokens and must stay below it: the answer's own
        # allowance comes on top.
        max_tokens = min(request.max_tokens + budget, facts.max_output_tokens)
        if budget and budget >= max_tokens:
            thinking = {**thinking, "budget_tokens": max(1024, max_tokens // 2)}  # type: ignore[dict-item]
        attempt = replace(request, model=model, messages=messages, max_tokens=max_tokens, thinking=thinking)
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
                    text = joiner.feed(item.text)
                    if text:
                        view.shown += text
                        yield TextChunk(text)
                    continue
                if isinstance(item, ThinkingChunk):
                    yield item
                    continue
                if held := joiner.finish():
                    view.shown += held
                    yield TextChunk(held)
                yield _merged(item, base) if base.strip() else item
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()


@dataclass
class _View:
    shown: str = ""
    """Text the user has seen during this call, across attempts."""
    errors: dict[str, LLMError] = field(default_factory=dict)
    continuations: int = 0
    """Answers continued after stopping at max_tokens."""
    usage: Usage = field(default_factory=Usage)
    """Usage of the attempts that were continued, added to the final one."""

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


def _merged(done: MessageComplete, base: str) -> MessageComplete:
    """The continuation's content with the text shown before it as the start of its first
    text block — its repeat of that text dropped as the stream's was — so what is stored is
    exactly what the user saw."""
    content: list[dict[str, Any]] = [dict(b) for b in done.content]
    malformed = list(done.malformed)
    # Thinking stays first (the API requires it of a turn in a tool loop).
    at = next((i for i, b in enumerate(content) if b.get("type") not in _THINKING), len(content))
    if at < len(content) and content[at].get("type") == "text":
        content[at]["text"] = base + Joiner(base).join(content[at].get("text", ""))
    elif base.strip():
        content.insert(at, {"type": "text", "text": base})
        malformed = [
            replace(m, block_index=m.block_index + 1) if m.block_index is not None and m.block_index >= at else m
            for m in malformed
        ]
    return replace(done, content=content, malformed=malformed)


_THINKING = ("thinking", "redacted_thinking")


def _cut_by_limit(done: MessageComplete) -> bool:
    """Stopped at max_tokens in the middle of a text answer (a cut tool call is the loop's)."""
    return done.stop_reason == "max_tokens" and _is_final(done)


def _is_final(done: MessageComplete) -> bool:
    return bool(done.content) and not any(b.get("type") == "tool_use" for b in done.content)


def _reason(exc: LLMError) -> str:
    if isinstance(exc, LLMUnsupported):
        return f"cannot be used ({exc})"
    if exc is _REFUSED:
        return "declined to answer"
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


class _Refused(LLMError):
    pass


_REFUSED = _Refused("The model declined to answer.")

_NOTE = re.compile(r"\n\n\(answered by [^\n]*\)\Z")


def without_fallback_note(text: str) -> str:
    """The visible answer without the fallback note ending it (e.g. so a heartbeat's
    "nothing to report" is still recognised when a fallback model said it)."""
    return _NOTE.sub("", text)


def _note(used: str, requested: str, error: LLMError | None) -> str:
    if isinstance(error, LLMExhausted):
        why = "is paused after repeated failures"
    elif isinstance(error, LLMUnsupported) or error is _REFUSED:
        why = _reason(error)
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
    if all(isinstance(exc, LLMUnsupported) or exc is _REFUSED for _, exc in tried):
        # Waiting a minute will not change what the models accept: say what did not work.
        return LLMUnsupported(f"{lead} Tried: {'; '.join(parts)}.", feature="model")
    return LLMExhausted(f"{lead} Tried: {'; '.join(parts)}. Please try again in a minute.")
