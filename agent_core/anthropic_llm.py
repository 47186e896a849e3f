"""`LLMClient` over the anthropic SDK: one streaming Messages API call, translated into our
own values. Everything the SDK raises is translated to `agent_core.llm.LLMError` here, and so
are the faults the SDK does not see: a stream with no event for `stall_timeout_s`
(`LLMStalled`) and one that ends without `message_stop` (`LLMTruncated`).

Retries are not done here: the SDK's own (`max_retries`, 0 by default) cannot see the circuit
breakers nor a stream that breaks after it started; `agent_core.failover` does them."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import anthropic
import httpx2

from agent_core.events import Usage
from agent_core.llm import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequest,
    LLMStalled,
    LLMTruncated,
    LLMUnavailable,
    LLMUnsupported,
    MalformedToolUse,
    ModelListing,
    MessageComplete,
    StreamItem,
    TextChunk,
    ThinkingChunk,
)
from agent_core.text import clean_json, clean_text

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class AnthropicLLM:
    """LLMClient over the anthropic SDK (base URL and key from the environment or arguments)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        timeout_s: float = 120.0,
        stall_timeout_s: float | None = 60.0,
    ) -> None:
        # Without a key the SDK fails every request with a bare TypeError; say it plainly.
        self._has_key = bool(api_key)
        self._stall_s = stall_timeout_s
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or "missing", base_url=base_url, max_retries=max_retries, timeout=timeout_s
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        if not self._has_key:
            raise LLMAuthError("No API key for the model service: set ANTHROPIC_API_KEY (see `roost doctor`).")
        try:
            async for item in self._stream(request):
                yield item
        except anthropic.APIError as exc:
            raise translate_error(exc) from exc
        except httpx2.TransportError as exc:
            # A connection dropped mid-stream is not wrapped by the SDK.
            raise LLMUnavailable("The connection to the model service broke mid-answer.") from exc

    async def count_tokens(self, request: LLMRequest) -> int:
        """The prompt's size as the service counts it (POST /v1/messages/count_tokens)."""
        kwargs: dict[str, Any] = {"model": request.model, "system": request.system, "messages": request.messages}
        if request.tools:
            kwargs["tools"] = request.tools
        try:
            counted = await self._client.messages.count_tokens(**kwargs)
        except anthropic.APIError as exc:
            raise translate_error(exc) from exc
        return counted.input_tokens

    async def list_models(self) -> list[ModelListing]:
        if not self._has_key:
            raise LLMAuthError("No API key for the model service: set ANTHROPIC_API_KEY.")
        try:
            return [_listing(m) async for m in self._client.models.list(limit=100)]
        except anthropic.APIError as exc:
            raise translate_error(exc) from exc
        except httpx2.TransportError as exc:
            raise LLMUnavailable("Could not reach the model service.") from exc

    async def model_info(self, model_id: str) -> ModelListing | None:
        if not self._has_key:
            raise LLMAuthError("No API key for the model service: set ANTHROPIC_API_KEY.")
        try:
            return _listing(await self._client.models.retrieve(model_id))
        except anthropic.NotFoundError:
            return None
        except anthropic.APIError as exc:
            raise translate_error(exc) from exc
        except httpx2.TransportError as exc:
            raise LLMUnavailable("Could not reach the model service.") from exc

    async def _stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "system": request.system,
            "messages": request.messages,
        }
        if request.tools:
            kwargs["tools"] = request.tools
        if request.thinking is not None:
            kwargs["thinking"] = request.thinking
        # The wait for the response's headers counts as a stall too.
        stream = await self._within_stall(self._client.messages.create(stream=True, **kwargs))
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        # A high surrogate ending a delta may be half of an emoji completed by the next delta:
        # held back until then, so the pair survives while a truly lone one is cleaned.
        held: dict[int, str] = {}
        usage = Usage()
        stop_reason = "end_turn"
        model = request.model
        stopped = False
        async with stream:
            events = stream.__aiter__()
            while True:
                try:
                    event = await self._within_stall(anext(events))
                except StopAsyncIteration:
                    break
                kind = event.type
                if kind == "message_stop":
                    stopped = True
                elif kind == "message_start":
                    model = event.message.model or model
                    usage = _usage(event.message.usage)
                elif kind == "content_block_start":
                    block = event.content_block.model_dump(exclude_none=True)
                    if block.get("type") in ("tool_use", "server_tool_use"):
                        block["input"] = {}
                        partial_json[event.index] = []
                    blocks[event.index] = block
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        raw = held.pop(event.index, "") + delta.text
                        if raw and "\ud800" <= raw[-1] <= "\udbff":
                            held[event.index], raw = raw[-1], raw[:-1]
                        text = clean_text(_join_pairs(raw))
                        if text:
                            blocks[event.index]["text"] = blocks[event.index].get("text", "") + text
                            yield TextChunk(text)
                    elif delta.type == "input_json_delta":
                        partial_json.setdefault(event.index, []).append(delta.partial_json)
                    elif delta.type == "thinking_delta":
                        # Kept byte for byte (never cleaned): the signature vouches for it.
                        block = blocks[event.index]
                        block["thinking"] = block.get("thinking", "") + delta.thinking
                        if delta.thinking:
                            yield ThinkingChunk(delta.thinking)
                    elif delta.type == "signature_delta":
                        blocks[event.index]["signature"] = delta.signature
                elif kind == "content_block_stop" and event.index in held:
                    text = clean_text(held.pop(event.index))
                    blocks[event.index]["text"] = blocks[event.index].get("text", "") + text
                    yield TextChunk(text)
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    if event.usage is not None:
                        server = getattr(event.usage, "server_tool_use", None)
                        usage = Usage(
                            usage.input_tokens,
                            event.usage.output_tokens or usage.output_tokens,
                            usage.cache_read_input_tokens,
                            usage.cache_creation_input_tokens,
                            (getattr(server, "web_search_requests", 0) or 0) if server else usage.web_search_requests,
                        )
        if not stopped:
            # A proxy or a dying server can end the body cleanly mid-answer: without
            # message_stop the content is incomplete, never a finished answer.
            raise LLMTruncated("The answer from the model service was cut off.")
        content, malformed = _finish_blocks(blocks, partial_json)
        yield MessageComplete(content, clean_text(stop_reason), usage, clean_text(model), malformed)


    async def _within_stall(self, awaitable: Awaitable[_T]) -> _T:
        # Only the wait itself is timed, never the consumer's time between events.
        scope = asyncio.timeout(self._stall_s)
        try:
            async with scope:
                return await awaitable
        except TimeoutError:
            if not scope.expired():
                raise
            raise LLMStalled(
                f"The model service stopped sending for {self._stall_s:g} s mid-answer."
            ) from None


def _listing(info: Any) -> ModelListing:
    return ModelListing(
        clean_text(info.id), clean_text(info.display_name or ""),
        getattr(info, "max_input_tokens", None), getattr(info, "max_tokens", None),
    )  # fmt: skip


def _join_pairs(text: str) -> str:
    """Surrogate halves that arrived in separate JSON strings, joined into their character;
    lone ones are left for clean_text."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _finish_blocks(
    blocks: dict[int, dict[str, Any]], partial_json: dict[int, list[str]]
) -> tuple[list[dict[str, Any]], list[MalformedToolUse]]:
    content: list[dict[str, Any]] = []
    malformed: list[MalformedToolUse] = []
    for index in sorted(blocks):
        block = blocks[index]
        kind = block.get("type")
        if kind == "text":
            # The API rejects whitespace-only text blocks in later requests: never store one.
            if block.get("text", "").strip():
                content.append({"type": "text", "text": block["text"]})
        elif kind == "tool_use":
            raw = clean_text("".join(partial_json.get(index, [])))
            # JSON escapes can spell a lone surrogate or a NUL ("\\ud83d", "\\u0000").
            parsed, problem = _parse_tool_input(raw)
            tool_id, name = clean_text(block["id"]), clean_text(block["name"])
            if problem is not None:
                malformed.append(MalformedToolUse(tool_id, name, raw, problem, len(content)))
            content.append({"type": "tool_use", "id": tool_id, "name": name, "input": clean_json(parsed)})
        elif kind == "server_tool_use":
            # The service's own tool call (web search): its input arrives like a tool_use's.
            parsed, _ = _parse_tool_input("".join(partial_json.get(index, [])))
            content.append({"type": "server_tool_use", "id": block["id"], "name": block["name"], "input": parsed})
        elif kind == "web_search_tool_result":
            # Sent back exactly as received (its encrypted content is the service's).
            content.append({k: v for k, v in block.items() if k != "caller"})
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": block.get("thinking", ""), "signature": block.get("signature", "")})
        elif kind == "redacted_thinking":
            content.append({"type": "redacted_thinking", "data": block.get("data", "")})
        # other block types are not produced without being asked for
    return content, malformed


def _parse_tool_input(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"expected a JSON object, got {type(value).__name__}"
    return value, None


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    return Usage(
        raw.input_tokens or 0,
        raw.output_tokens or 0,
        getattr(raw, "cache_read_input_tokens", 0) or 0,
        getattr(raw, "cache_creation_input_tokens", 0) or 0,
    )


def translate_error(exc: anthropic.APIError) -> LLMError:
    if isinstance(exc, anthropic.RateLimitError) or (
        isinstance(exc, anthropic.APIStatusError) and _api_error_type(exc) == "rate_limit_error"
    ):
        retry_after = _retry_after(exc)
        return LLMRateLimited("The model service is rate limiting us.", retry_after)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status == 200:  # an `event: error` inside a stream that had started fine
            status = _STREAM_ERROR_STATUS.get(_api_error_type(exc), 500)
        if status in (529, 503):
            return LLMOverloaded("The model service is overloaded right now.")
        if status in (401, 403):
            return LLMAuthError(
                "The model service rejected the API key (check ANTHROPIC_API_KEY)."
            )
        if status == 404 and _api_error_type(exc) == "not_found_error" and _api_message(exc).startswith("model:"):
            model = _api_message(exc).removeprefix("model:").strip()
            return LLMUnsupported(
                f"The model service does not know the model {model} (check ROOST_AGENT__MODEL; "
                "`roost doctor` checks every configured id).", feature="model", detail=_api_message(exc),
            )
        if status == 400 and (unsupported := _unsupported(_api_message(exc))) is not None:
            return unsupported
        if status == 400:
            message = _api_message(exc)
            too_long = _TOO_LONG.search(message)
            if too_long or "prompt is too long" in message.lower():
                return LLMBadRequest(
                    "This conversation is too long for the model.",  # /new is the loop's last resort, not this
                    detail=message,
                    too_long=True,
                    prompt_tokens=int(too_long.group(1)) if too_long else None,
                    max_tokens=int(too_long.group(2)) if too_long else None,
                )
            return LLMBadRequest(f"The model service rejected the request: {message}", detail=message)
        if status >= 500:
            return LLMUnavailable(f"The model service failed (HTTP {status}).")
        return LLMError(f"The model service answered HTTP {status}: {_api_message(exc)}")
    if isinstance(exc, anthropic.APITimeoutError):
        return LLMUnavailable("The model service timed out.")
    if isinstance(exc, anthropic.APIConnectionError):
        return LLMUnavailable("Could not reach the model service.")
    return LLMError("The model service failed.")


def _unsupported(message: str) -> LLMUnsupported | None:
    """A 400 about what the model accepts rather than about the conversation."""
    lowered = message.lower()
    if "does not support assistant message prefill" in lowered:
        return LLMUnsupported("The model does not accept a prefilled answer.", feature="prefill", detail=message)
    if limit := _MAX_OUTPUT.search(message):
        return LLMUnsupported(
            f"The model allows at most {limit.group(1)} output tokens (ROOST_AGENT__MAX_TOKENS is higher).",
            feature="max_tokens", detail=message, limit=int(limit.group(1)),
        )  # fmt: skip
    parameter = _PARAMETER.match(message)
    if parameter and parameter.group(1) in _PARAMETERS and ("support" in lowered or "deprecated" in lowered):
        name = parameter.group(1)
        return LLMUnsupported(f"The model does not support `{name}`.", feature=name, detail=message)
    return None


_MAX_OUTPUT = re.compile(r"max_tokens: \d+ > (\d+), which is the maximum allowed number of output tokens")
_PARAMETER = re.compile(r"`?(\w+)`?[: ]")
_PARAMETERS = ("temperature", "top_p", "top_k", "thinking", "output_config", "speed", "service_tier", "inference_geo")
_TOO_LONG = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)", re.IGNORECASE)
_STREAM_ERROR_STATUS = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500}


def _api_error_type(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return error["type"]
    return ""


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _api_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return str(exc.message)
