"""How a ``Reply`` looks on the wire: the real SSE event sequence, or a JSON ``Message``.

``stream_steps`` is pure: it yields SSE events to send and the directives (``Stall`` pauses,
``Disconnect``, ``Truncate``) the server acts on between them. The event order matches the
real service:
``message_start``, then per block ``content_block_start`` / ``content_block_delta``… /
``content_block_stop`` (a ``ping`` after the first block starts), ``message_delta`` with
``stop_reason`` and cumulative ``usage``, ``message_stop``. Tool input starts with an empty
``partial_json`` delta, as the real service sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from tests.fakes.anthropic_script import (
    Disconnect,
    RawToolUse,
    Reply,
    Stall,
    StreamError,
    ServerToolUse,
    Text,
    Thinking,
    ToolUse,
    WebSearchResults,
    Truncate,
)
from tests.fakes.anthropic_usage import PromptUsage, tokens


@dataclass(frozen=True, slots=True)
class SseEvent:
    name: str
    data: Mapping[str, Any]

    def encode(self) -> bytes:
        return (
            f"event: {self.name}\ndata: {json.dumps(self.data, separators=(',', ':'))}\n\n".encode()
        )


Step: TypeAlias = SseEvent | Stall | Disconnect | Truncate


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def tool_input_json(block: ToolUse | RawToolUse) -> str:
    return block.raw_json if isinstance(block, RawToolUse) else json.dumps(dict(block.input))


def output_tokens(reply: Reply) -> int:
    chars = sum(
        len(b.text) if isinstance(b, Text | Thinking)
        else len(b.name) + len(tool_input_json(b)) if isinstance(b, ToolUse | RawToolUse)
        else 10
        for b in reply.blocks
    )  # fmt: skip
    return max(1, tokens(chars))


def usage_json(
    prompt: PromptUsage, output: int, overrides: Mapping[str, int] | None, searches: int = 0
) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": prompt.input_tokens,
        "cache_creation_input_tokens": prompt.cache_creation_input_tokens,
        "cache_read_input_tokens": prompt.cache_read_input_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": prompt.cache_creation_input_tokens,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": output,
        "service_tier": "standard",
    }
    if searches:
        usage["server_tool_use"] = {"web_search_requests": searches, "web_fetch_requests": 0}
    usage.update(overrides or {})
    return usage


def _message_shell(
    message_id: str, model: str, content: list[Any], usage: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": dict(usage),
    }


def thinking_json(block: Thinking) -> dict[str, Any]:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.signature}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def web_search_json(block: WebSearchResults) -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": block.tool_use_id,
        "content": [
            {"type": "web_search_result", "url": url, "title": title, "encrypted_content": f"enc:{url}"}
            for url, title in block.results
        ],
    }


def _searches(reply: Reply) -> int:
    return sum(1 for b in reply.blocks if isinstance(b, ServerToolUse) and b.name == "web_search")


def _block_start(block: Any) -> dict[str, Any]:
    if isinstance(block, ServerToolUse):
        return {"type": "server_tool_use", "id": block.id, "name": block.name, "input": {}}
    if isinstance(block, WebSearchResults):
        return web_search_json(block)
    if isinstance(block, Thinking):
        return thinking_json(block) if block.redacted else {"type": "thinking", "thinking": "", "signature": ""}
    if isinstance(block, Text):
        return {"type": "text", "text": ""}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_steps(
    reply: Reply, *, message_id: str, model: str, prompt: PromptUsage
) -> Iterator[Step]:
    """The SSE answer for ``reply`` (whose tool uses already carry ids)."""
    final_usage = usage_json(prompt, output_tokens(reply), reply.usage, _searches(reply))
    start_usage = {**final_usage, "output_tokens": 1}  # the service reports 1 until the end
    yield SseEvent(
        "message_start",
        {"type": "message_start", "message": _message_shell(message_id, model, [], start_usage)},
    )
    index = 0
    pinged = False
    for part in reply.parts:
        if isinstance(part, Stall | Disconnect):
            yield part
            continue
        if isinstance(part, Truncate):
            yield part
            return
        if isinstance(part, StreamError):
            yield SseEvent(
                "error",
                {"type": "error", "error": {"type": part.error_type, "message": part.message}},
            )
            return
        yield SseEvent(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": _block_start(part)},
        )
        if not pinged:
            yield SseEvent("ping", {"type": "ping"})
            pinged = True
        if isinstance(part, Thinking):
            deltas = [] if part.redacted else [
                *({"type": "thinking_delta", "thinking": c} for c in _chunks(part.text, part.chunk_size)),
                {"type": "signature_delta", "signature": part.signature},
            ]  # fmt: skip
            for delta in deltas:
                yield SseEvent(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
        elif isinstance(part, WebSearchResults):
            pass  # whole at its start
        elif isinstance(part, ServerToolUse):
            for chunk in ["", *_chunks(json.dumps(dict(part.input)), 16)]:
                delta = {"type": "input_json_delta", "partial_json": chunk}
                yield SseEvent(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
        elif isinstance(part, Text):
            for n, chunk in enumerate(_chunks(part.text, part.chunk_size)):
                if n and part.delay_s > 0:
                    yield Stall(part.delay_s)
                delta = {"type": "text_delta", "text": chunk}
                yield SseEvent(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
        else:
            for chunk in ["", *_chunks(tool_input_json(part), part.chunk_size)]:
                delta = {"type": "input_json_delta", "partial_json": chunk}
                yield SseEvent(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
        yield SseEvent("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    if not pinged:
        yield SseEvent("ping", {"type": "ping"})
    delta_usage = {
        k: v for k, v in final_usage.items() if k not in ("cache_creation", "service_tier")
    }
    yield SseEvent(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": reply.effective_stop_reason,
                "stop_sequence": reply.stop_sequence,
            },
            "usage": delta_usage,
        },
    )
    yield SseEvent("message_stop", {"type": "message_stop"})


def message_json(
    reply: Reply, *, message_id: str, model: str, prompt: PromptUsage
) -> dict[str, Any]:
    """The non-streaming answer for ``reply`` (whose tool uses already carry ids)."""
    content: list[dict[str, Any]] = []
    for block in reply.blocks:
        if isinstance(block, Thinking):
            content.append(thinking_json(block))
            continue
        if isinstance(block, ServerToolUse):
            content.append({"type": "server_tool_use", "id": block.id, "name": block.name, "input": dict(block.input)})
            continue
        if isinstance(block, WebSearchResults):
            content.append(web_search_json(block))
            continue
        if isinstance(block, Text):
            content.append({"type": "text", "text": block.text})
            continue
        raw = tool_input_json(block)
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw  # malformed scripted JSON: hand over the string rather than invent an input
        content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": value})
    message = _message_shell(
        message_id, model, content, usage_json(prompt, output_tokens(reply), reply.usage, _searches(reply))
    )
    message["stop_reason"] = reply.effective_stop_reason
    message["stop_sequence"] = reply.stop_sequence
    return message
