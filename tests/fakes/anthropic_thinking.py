"""Thinking and web search in the fake Messages API, as strict as the real service.

Reply parts (accepted by ``anthropic_script.Reply``):

- ``Thinking(text)`` — a thinking block: ``content_block_start`` with empty thinking, then
  ``thinking_delta`` chunks, then one ``signature_delta``. With ``display: "omitted"`` the
  text is left out (only the signature comes, as the service does).
- ``RedactedThinking()`` — a ``redacted_thinking`` block with opaque ``data``.
- ``WebSearch(query, results)`` — a ``server_tool_use`` (``srvtoolu_…``, input streamed as
  ``input_json_delta``) and its ``web_search_tool_result`` (whole in its
  ``content_block_start``), counted in ``usage.server_tool_use.web_search_requests``.

``prepare_reply`` (called by the server for every reply it serves): when the request asks for
thinking and the reply has none, a thinking block leads it — so every answer to a thinking
request thinks, and the tool-loop rule below always applies. A ``WebSearch`` answered to a
request that offers no ``web_search`` tool is a broken test: HTTP 500 naming it.

``check_request`` (400 ``invalid_request_error``, the service's wording where known):

- the ``thinking`` parameter's shape (type, ``budget_tokens`` ≥ 1024 and < ``max_tokens``,
  ``display``); ``temperature`` other than 1 together with thinking;
- every thinking block's ``signature``, redacted block's ``data`` and web search result's
  ``encrypted_content`` must be one this fake issued, unaltered (an HMAC under a per-process
  key covers the thinking text and the results);
- in a tool loop (the last message carries ``tool_result`` blocks) with thinking on, the
  assistant turn before it must start with a thinking or redacted_thinking block; with
  thinking off, that turn must hold none;
- a ``web_search_tool_result`` must follow its ``server_tool_use`` in the same turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.fakes.anthropic_validation import ApiError, invalid

if TYPE_CHECKING:
    from tests.fakes.anthropic_script import Reply

_KEY = secrets.token_bytes(32)
_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
THINKING_BLOCKS = ("thinking", "redacted_thinking")


@dataclass(frozen=True, slots=True)
class Thinking:
    text: str = "Let me think about what is being asked and how best to answer it."
    chunk_size: int = 24


@dataclass(frozen=True, slots=True)
class RedactedThinking:
    pass


@dataclass(frozen=True, slots=True)
class WebSearch:
    query: str
    results: tuple[tuple[str, str, str], ...] = (("Example page", "https://example.com/", "Example text."),)
    """(title, url, page text) per result; the text travels sealed in encrypted_content."""
    id: str | None = None


ExtraBlock = Thinking | RedactedThinking | WebSearch


def _mac(data: bytes) -> bytes:
    return hmac.new(_KEY, data, hashlib.sha256).digest()


def sign(thinking: str) -> str:
    return base64.b64encode(b"EqQB" + _mac(thinking.encode("utf-8", "surrogatepass"))).decode()


def seal(payload: str) -> str:
    raw = payload.encode()
    return base64.b64encode(raw + _mac(raw)).decode()


def unseal(sealed: object) -> str | None:
    """The payload of a value `seal` made, or None if it is not one (altered, invented)."""
    if not isinstance(sealed, str):
        return None
    try:
        raw = base64.b64decode(sealed, validate=True)
    except ValueError:
        return None
    payload, mac = raw[:-32], raw[-32:]
    return payload.decode(errors="replace") if len(raw) > 32 and hmac.compare_digest(mac, _mac(payload)) else None


def thinking_param(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's thinking config when it turns thinking on, else None."""
    value = body.get("thinking")
    if isinstance(value, dict) and value.get("type") in ("enabled", "adaptive"):
        return value
    return None


def offers_web_search(body: Mapping[str, Any]) -> bool:
    return any(
        isinstance(t, dict) and t.get("name") == "web_search" and str(t.get("type", "")).startswith("web_search_")
        for t in body.get("tools") or []
    )


# -- serving ------------------------------------------------------------------------------


def prepare_reply(reply: Reply, body: Mapping[str, Any]) -> Reply:
    from tests.fakes.anthropic_script import Reply

    if any(isinstance(p, WebSearch) for p in reply.parts) and not offers_web_search(body):
        raise ApiError(500, "api_error", "fake: a WebSearch was scripted for a request that offers no web_search tool")
    if thinking_param(body) is None or any(isinstance(p, Thinking | RedactedThinking) for p in reply.parts):
        return reply
    return Reply(
        Thinking(), *reply.parts, stop_reason=reply.stop_reason, stop_sequence=reply.stop_sequence, usage=reply.usage
    )


def web_searches(reply: Reply) -> int:
    return sum(1 for p in reply.parts if isinstance(p, WebSearch))


def _omitted(body: Mapping[str, Any]) -> bool:
    param = thinking_param(body)
    return param is not None and param.get("display") == "omitted"


def _search_id(part: WebSearch) -> str:
    return part.id or "srvtoolu_01" + hashlib.sha256(part.query.encode()).hexdigest()[:22]


def _results(part: WebSearch) -> list[dict[str, Any]]:
    return [
        {"type": "web_search_result", "title": title, "url": url, "encrypted_content": seal(text), "page_age": "1 day ago"}
        for title, url, text in part.results
    ]


def blocks_json(part: ExtraBlock, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The content block(s) of one part, as a non-streaming answer carries them."""
    if isinstance(part, Thinking):
        text = "" if _omitted(body) else part.text
        return [{"type": "thinking", "thinking": text, "signature": sign(text)}]
    if isinstance(part, RedactedThinking):
        return [{"type": "redacted_thinking", "data": seal("redacted:" + secrets.token_hex(8))}]
    search_id = _search_id(part)
    return [
        {"type": "server_tool_use", "id": search_id, "name": "web_search", "input": {"query": part.query}},
        {"type": "web_search_tool_result", "tool_use_id": search_id, "content": _results(part)},
    ]


def stream_events(part: ExtraBlock, index: int, body: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, data) of one part's blocks from ``index`` on, as the service streams them."""
    for n, block in enumerate(blocks_json(part, body)):
        at = index + n
        kind = block["type"]
        if kind == "thinking":
            start, deltas = {**block, "thinking": "", "signature": ""}, []
            text = block["thinking"]
            size = part.chunk_size if isinstance(part, Thinking) else 24
            deltas = [{"type": "thinking_delta", "thinking": text[i : i + size]} for i in range(0, len(text), size)]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "server_tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in ("", json.dumps(block["input"]))]
        else:
            start, deltas = block, []
        yield "content_block_start", {"type": "content_block_start", "index": at, "content_block": start}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": at, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": at}


def block_count(part: ExtraBlock) -> int:
    return 2 if isinstance(part, WebSearch) else 1


# -- validation ---------------------------------------------------------------------------


def check_request(body: Mapping[str, Any]) -> None:
    """Raise ``ApiError`` for what the service refuses about thinking and server tools."""
    param = _check_param(body)
    messages = body.get("messages") or []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        searches: set[str] = set()
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            _check_block(block, f"messages.{i}.content.{j}", searches)
    _check_tool_loop(messages, thinking_on=param is not None)


def _check_param(body: Mapping[str, Any]) -> dict[str, Any] | None:
    value = body.get("thinking")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("enabled", "disabled", "adaptive", "between_tools"):
        raise invalid("thinking.type: Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'")
    kind = value["type"]
    if "display" in value and value["display"] not in (None, "summarized", "omitted"):
        raise invalid(f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'")
    if kind == "enabled":
        budget = value.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise invalid("thinking.enabled.budget_tokens: Field required")
        if budget < 1024:
            raise invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if isinstance(body.get("max_tokens"), int) and body["max_tokens"] <= budget:
            raise invalid(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
                f"{_DOCS}#max-tokens-and-context-window-size"
            )
    if kind not in ("enabled", "adaptive"):
        return None
    if "temperature" in body and body["temperature"] != 1:
        raise invalid(
            "`temperature` may only be set to 1 when thinking is enabled. Please consult our documentation at "
            f"{_DOCS}#feature-compatibility"
        )
    return value


def _check_block(block: Mapping[str, Any], path: str, searches: set[str]) -> None:
    kind = block.get("type")
    if kind == "thinking":
        text, signature = block.get("thinking"), block.get("signature")
        if not isinstance(text, str) or not isinstance(signature, str) or not hmac.compare_digest(signature, sign(text)):
            raise invalid(f"{path}: Invalid `signature` in `thinking` block")
    elif kind == "redacted_thinking":
        if unseal(block.get("data")) is None:
            raise invalid(f"{path}: Invalid `data` in `redacted_thinking` block")
    elif kind == "server_tool_use":
        searches.add(str(block.get("id")))
    elif kind == "web_search_tool_result":
        if block.get("tool_use_id") not in searches:
            raise invalid(
                f"{path}: `web_search_tool_result` block(s) provided when previous message does not contain "
                f"a corresponding `server_tool_use` block: {block.get('tool_use_id')}"
            )
        content = block.get("content")
        results = content if isinstance(content, list) else []
        for k, result in enumerate(results):
            if not isinstance(result, dict) or unseal(result.get("encrypted_content")) is None:
                raise invalid(f"{path}.content.{k}.encrypted_content: Invalid encrypted content")


def _check_tool_loop(messages: list[Any], *, thinking_on: bool) -> None:
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
        return
    last = messages[-1].get("content")
    if not (isinstance(last, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last)):
        return
    # The assistant turn the tool results answer: the consecutive assistant messages before them.
    i = len(messages) - 2
    while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") == "user":
        i -= 1
    start = i
    while start - 1 >= 0 and isinstance(messages[start - 1], dict) and messages[start - 1].get("role") == "assistant":
        start -= 1
    if i < 0:
        return
    turn = [
        (f"messages.{m}.content.{j}", b)
        for m in range(start, i + 1)
        for j, b in enumerate(messages[m].get("content") if isinstance(messages[m].get("content"), list) else [])
    ]
    if not turn:
        return
    first_path, first = turn[0]
    if thinking_on and first.get("type") not in THINKING_BLOCKS:
        raise invalid(
            f"{first_path}.type: Expected `thinking` or `redacted_thinking`, but found `{first.get('type')}`. "
            "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
            "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
            "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
            f"our documentation at {_DOCS}"
        )
    if not thinking_on:
        for path, block in turn:
            if block.get("type") in THINKING_BLOCKS:
                raise invalid(
                    f"{path}: When thinking is disabled, an `assistant` message in the final position cannot "
                    "contain `thinking`. To use thinking blocks, enable `thinking` in your request."
                )
