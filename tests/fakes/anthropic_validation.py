"""Request validation for the fake Messages API, as strict as the real service.

``validate_request`` raises ``ApiError`` (HTTP 400 ``invalid_request_error``) with the real
service's message wording where it is known, otherwise a precise message in the same
``<json path>: <problem>`` style. It checks in request order and reports the first problem.

Consecutive messages with the same role are allowed (the service merges them); the
tool_use/tool_result adjacency rules apply to the merged turns. Error paths (``messages.3``)
always name indices of the messages as sent.
"""

from __future__ import annotations

import base64
import binascii

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Endpoint = Literal["messages", "count_tokens"]

TOOL_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
TOOL_ID_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_CACHE_BREAKPOINTS = 4

_COMMON_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "cache_control",
        "output_config",
        "speed",
    }
)
_ALLOWED_KEYS: dict[Endpoint, frozenset[str]] = {
    "messages": _COMMON_KEYS
    | {
        "max_tokens",
        "stream",
        "metadata",
        "stop_sequences",
        "service_tier",
        "container",
        "diagnostics",
        "inference_geo",
        "temperature",
        "top_p",
        "top_k",
        "context_management",
        "mcp_servers",
    },
    "count_tokens": _COMMON_KEYS | {"context_management", "mcp_servers"},
}
_BLOCK_TYPES = (
    "bash_code_execution_tool_result",
    "code_execution_tool_result",
    "container_upload",
    "document",
    "image",
    "redacted_thinking",
    "search_result",
    "server_tool_use",
    "text",
    "text_editor_code_execution_tool_result",
    "thinking",
    "tool_result",
    "tool_search_tool_result",
    "tool_use",
    "web_fetch_tool_result",
    "web_search_tool_result",
)
_TOOL_RESULT_CONTENT_TYPES = ("document", "image", "search_result", "text", "tool_reference")
_TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


class ApiError(Exception):
    """An error answer: HTTP ``status`` with body ``{"type":"error","error":{"type","message"}}``."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


@dataclass(slots=True)
class _Turn:
    """Consecutive same-role messages merged, each block remembering where it was sent."""

    role: str
    first_index: int
    blocks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (json path, block)


def validate_request(body: object, *, endpoint: Endpoint, require_user_first: bool = True) -> None:
    """Raise ``ApiError`` for the first way ``body`` breaks the Messages API contract."""
    if not isinstance(body, dict):
        raise invalid("Input should be a valid dictionary")
    for key in body:
        if key not in _ALLOWED_KEYS[endpoint]:
            raise invalid(f"{key}: Extra inputs are not permitted")
    _check_model(body)
    if endpoint == "messages":
        _check_max_tokens(body)
        if "stream" in body and not isinstance(body["stream"], bool):
            raise invalid("stream: Input should be a valid boolean")
    tool_names = _check_tools(body)
    _check_tool_choice(body, tool_names)
    _check_system(body)
    turns = _check_messages(body, require_user_first=require_user_first)
    _check_tool_pairing(turns)
    if "tools" not in body or not body["tools"]:
        for _, block in _all_blocks(turns):
            if block["type"] in ("tool_use", "tool_result"):
                raise invalid(
                    "Requests which include `tool_use` or `tool_result` blocks must define tools."
                )
    _check_cache_breakpoints(body, turns)


def _check_model(body: Mapping[str, Any]) -> None:
    if "model" not in body:
        raise invalid("model: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise invalid("model: Input should be a valid string")


def _check_max_tokens(body: Mapping[str, Any]) -> None:
    if "max_tokens" not in body:
        raise invalid("max_tokens: Field required")
    value = body["max_tokens"]
    # bool is an int subclass in Python but not in JSON schema terms.
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid("max_tokens: Input should be a valid integer")
    if value < 1:
        raise invalid("max_tokens: Input should be greater than or equal to 1")


def _check_tools(body: Mapping[str, Any]) -> set[str]:
    tools = body.get("tools")
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise invalid("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        path = f"tools.{i}"
        if not isinstance(tool, dict):
            raise invalid(f"{path}: Input should be a valid dictionary")
        name = tool.get("name")
        if name is None:
            raise invalid(f"{path}.name: Field required")
        if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
            raise invalid(f"{path}.name: String should match pattern '{TOOL_NAME_RE.pattern}'")
        if name in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(name)
        _check_cache_control(tool, path)
        if tool.get("type") not in (None, "custom"):
            continue  # a versioned built-in tool (bash_…, web_search_…): no input_schema
        if "description" in tool and not isinstance(tool["description"], str):
            raise invalid(f"{path}.description: Input should be a valid string")
        schema = tool.get("input_schema")
        if schema is None:
            raise invalid(f"{path}.input_schema: Field required")
        if not isinstance(schema, dict):
            raise invalid(f"{path}.input_schema: Input should be a valid dictionary")
        if schema.get("type") != "object":
            raise invalid(f"{path}.input_schema.type: Input should be 'object'")
    return names


def _check_tool_choice(body: Mapping[str, Any], tool_names: set[str]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in _TOOL_CHOICE_TYPES:
        expected = ", ".join(f"'{t}'" for t in _TOOL_CHOICE_TYPES)
        raise invalid(f"tool_choice.type: Input should be {expected}")
    if choice["type"] != "none" and not tool_names:
        raise invalid("tool_choice: tool_choice may only be specified while providing tools.")
    if choice["type"] == "tool" and choice.get("name") not in tool_names:
        raise invalid(f"tool_choice.name: Tool '{choice.get('name')}' not found in provided tools")


def _check_system(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise invalid("system: Input should be a valid string or a valid list")
    for j, block in enumerate(system):
        path = f"system.{j}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise invalid(f"{path}.type: Input should be 'text'")
        _check_text(block, path, scope="system")
        _check_cache_control(block, path)


def _check_messages(body: Mapping[str, Any], *, require_user_first: bool) -> list[_Turn]:
    if "messages" not in body:
        raise invalid("messages: Field required")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise invalid("messages: Input should be a valid list")
    if not messages:
        raise invalid("messages: List should have at least 1 item after validation, not 0")
    turns: list[_Turn] = []
    for i, message in enumerate(messages):
        path = f"messages.{i}"
        if not isinstance(message, dict):
            raise invalid(f"{path}: Input should be a valid dictionary")
        for key in message:
            if key not in ("role", "content"):
                raise invalid(f"{path}.{key}: Extra inputs are not permitted")
        if "role" not in message:
            raise invalid(f"{path}.role: Field required")
        role = message["role"]
        if role not in ("user", "assistant"):
            raise invalid(f"{path}.role: Input should be 'user' or 'assistant'")
        if "content" not in message:
            raise invalid(f"{path}.content: Field required")
        is_last = i == len(messages) - 1
        blocks = _message_blocks(message["content"], path, role=role, is_last=is_last)
        if not blocks and not (is_last and role == "assistant"):
            raise invalid(
                f"{path}: all messages must have non-empty content except for the optional final assistant message"
            )
        if turns and turns[-1].role == role:
            turns[-1].blocks.extend(blocks)
        else:
            turns.append(_Turn(role=role, first_index=i, blocks=blocks))
    if require_user_first and turns[0].role != "user":
        raise invalid('messages: first message must use the "user" role')
    last = turns[-1]
    if last.role == "assistant" and last.blocks:
        tail = last.blocks[-1][1]
        if tail["type"] == "text" and tail["text"] != tail["text"].rstrip():
            raise invalid("messages: final assistant content cannot end with trailing whitespace")
    return turns


def _message_blocks(
    content: object, path: str, *, role: str, is_last: bool
) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(content, str):
        if content == "" and is_last and role == "assistant":
            return []  # an empty prefill is the "optional final assistant message"
        block = {"type": "text", "text": content}
        _check_text(block, f"{path}.content", scope="messages")
        return [(f"{path}.content", block)]
    if not isinstance(content, list):
        raise invalid(f"{path}.content: Input should be a valid string or a valid list")
    blocks = []
    for j, block in enumerate(content):
        block_path = f"{path}.content.{j}"
        _check_block(block, block_path, role=role)
        blocks.append((block_path, block))
    return blocks


def _check_block(block: object, path: str, *, role: str) -> None:
    if not isinstance(block, dict):
        raise invalid(f"{path}: Input should be a valid dictionary")
    kind = block.get("type")
    if kind is None:
        raise invalid(f"{path}: Unable to extract tag using discriminator 'type'")
    if kind not in _BLOCK_TYPES:
        expected = ", ".join(f"'{t}'" for t in _BLOCK_TYPES)
        raise invalid(
            f"{path}: Input tag '{kind}' found using 'type' does not match any of the expected tags: {expected}"
        )
    _check_cache_control(block, path)
    if kind == "text":
        _check_text(block, path, scope="messages")
    elif kind == "tool_use":
        if role != "assistant":
            raise invalid(f"{path}: `tool_use` blocks can only be in `assistant` messages")
        _check_tool_use(block, path)
    elif kind == "tool_result":
        if role != "user":
            raise invalid(f"{path}: `tool_result` blocks can only be in `user` messages")
        _check_tool_result(block, path)
    elif kind == "image":
        _check_image(block, path)
    elif kind == "document":
        _check_document(block, path)


_IMAGE_MAGIC = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
IMAGE_MAX_BYTES = 5 * 1024 * 1024
PDF_MAX_BYTES = 32 * 1024 * 1024


def _base64_data(source: Mapping[str, Any], path: str) -> bytes:
    data = source.get("data")
    if not isinstance(data, str):
        raise invalid(f"{path}.source.base64.data: Field required")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{path}.source.base64.data: invalid base64 data") from None


def _check_image(block: Mapping[str, Any], path: str) -> None:
    """Like the API: base64 (or url) source; a supported media type the bytes match; 5 MB."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise invalid(f"{path}.source: Field required")
    if source.get("type") == "url":
        if not isinstance(source.get("url"), str):
            raise invalid(f"{path}.source.url.url: Field required")
        return
    if source.get("type") != "base64":
        raise invalid(f"{path}.source: Input tag '{source.get('type')}' found using 'type' does not match any of the expected tags: 'base64', 'url'")
    media_type = source.get("media_type")
    if media_type not in _IMAGE_MAGIC:
        raise invalid(f"{path}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'")
    raw = _base64_data(source, path)
    if len(raw) > IMAGE_MAX_BYTES:
        raise invalid(f"{path}.source.base64: image exceeds 5 MB maximum: {len(raw)} bytes > {IMAGE_MAX_BYTES} bytes")
    if not raw.startswith(_IMAGE_MAGIC[media_type]) or (media_type == "image/webp" and raw[8:12] != b"WEBP"):
        raise invalid(f"{path}.source.base64.data: Image does not match the provided media type {media_type}")


def _check_document(block: Mapping[str, Any], path: str) -> None:
    source = block.get("source")
    if not isinstance(source, dict):
        raise invalid(f"{path}.source: Field required")
    kind = source.get("type")
    if kind == "text":
        if source.get("media_type") != "text/plain" or not isinstance(source.get("data"), str):
            raise invalid(f"{path}.source.text: media_type must be 'text/plain' and data a string")
        return
    if kind != "base64":
        raise invalid(f"{path}.source: Input tag '{kind}' found using 'type' does not match any of the expected tags: 'base64', 'content', 'text', 'url'")
    if source.get("media_type") != "application/pdf":
        raise invalid(f"{path}.source.base64.media_type: Input should be 'application/pdf'")
    raw = _base64_data(source, path)
    if len(raw) > PDF_MAX_BYTES:
        raise invalid(f"{path}.source.base64: PDF exceeds 32 MB maximum")
    if not raw.startswith(b"%PDF-"):
        raise invalid(f"{path}.source.base64.data: The PDF specified was not valid.")


def _check_text(block: Mapping[str, Any], path: str, *, scope: str) -> None:
    if "text" not in block:
        raise invalid(f"{path}.text: Field required")
    if not isinstance(block["text"], str):
        raise invalid(f"{path}.text: Input should be a valid string")
    if block["text"] == "":
        raise invalid(f"{scope}: text content blocks must be non-empty")
    if not block["text"].strip():
        raise invalid(f"{scope}: text content blocks must contain non-whitespace text")


def _check_tool_use(block: Mapping[str, Any], path: str) -> None:
    for key in ("id", "name", "input"):
        if key not in block:
            raise invalid(f"{path}.{key}: Field required")
    if not isinstance(block["id"], str) or not TOOL_ID_RE.match(block["id"]):
        raise invalid(f"{path}.id: String should match pattern '{TOOL_ID_RE.pattern}'")
    if not isinstance(block["name"], str) or not block["name"]:
        raise invalid(f"{path}.name: Input should be a valid string")
    if not isinstance(block["input"], dict):
        raise invalid(f"{path}.input: Input should be a valid dictionary")


def _check_tool_result(block: Mapping[str, Any], path: str) -> None:
    if "tool_use_id" not in block:
        raise invalid(f"{path}.tool_use_id: Field required")
    if not isinstance(block["tool_use_id"], str) or not TOOL_ID_RE.match(block["tool_use_id"]):
        raise invalid(f"{path}.tool_use_id: String should match pattern '{TOOL_ID_RE.pattern}'")
    if "is_error" in block and not isinstance(block["is_error"], bool):
        raise invalid(f"{path}.is_error: Input should be a valid boolean")
    content = block.get("content", "")
    if isinstance(content, str):
        return  # an empty string result is accepted: a tool may legitimately print nothing
    if not isinstance(content, list):
        raise invalid(f"{path}.content: Input should be a valid string or a valid list")
    for k, inner in enumerate(content):
        inner_path = f"{path}.content.{k}"
        if not isinstance(inner, dict) or inner.get("type") not in _TOOL_RESULT_CONTENT_TYPES:
            expected = ", ".join(f"'{t}'" for t in _TOOL_RESULT_CONTENT_TYPES)
            raise invalid(
                f"{inner_path}: Input tag '{inner.get('type') if isinstance(inner, dict) else None}' "
                f"found using 'type' does not match any of the expected tags: {expected}"
            )
        _check_cache_control(inner, inner_path)
        if inner["type"] == "text":
            _check_text(inner, inner_path, scope="messages")


def _check_tool_pairing(turns: list[_Turn]) -> None:
    """Every tool_use is answered by a tool_result in the very next (merged) user turn, results
    come first in that turn, and every result answers a tool_use of the turn just before."""
    seen_ids: set[str] = set()
    for t, turn in enumerate(turns):
        if turn.role == "assistant":
            uses = [(path, b) for path, b in turn.blocks if b["type"] == "tool_use"]
            for path, block in uses:
                if block["id"] in seen_ids:
                    raise invalid(f"{path}: `tool_use` ids must be unique")
                seen_ids.add(block["id"])
            following = turns[t + 1] if t + 1 < len(turns) else None
            answered = (
                {b["tool_use_id"] for _, b in following.blocks if b["type"] == "tool_result"}
                if following
                else set()
            )
            missing = [(path, b["id"]) for path, b in uses if b["id"] not in answered]
            if missing:
                at = ".".join(missing[0][0].split(".")[:2])  # messages.N of the first unanswered use
                ids = ", ".join(tool_id for _, tool_id in missing)
                raise invalid(
                    f"{at}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
                    "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                )
            continue
        previous = turns[t - 1] if t > 0 else None
        expected = (
            [b["id"] for _, b in previous.blocks if b["type"] == "tool_use"] if previous else []
        )
        results = [(path, b) for path, b in turn.blocks if b["type"] == "tool_result"]
        if expected:
            kinds = [b["type"] for _, b in turn.blocks]
            leading = next((n for n, kind in enumerate(kinds) if kind != "tool_result"), len(kinds))
            if leading < len(results):
                raise invalid(
                    f"messages.{turn.first_index}: Did not find {len(expected)} `tool_result` block(s) at the beginning "
                    "of this message. Messages following `tool_use` blocks must begin with a matching number of "
                    "`tool_result` blocks."
                )
        results_seen: set[str] = set()
        for path, block in results:
            tool_use_id = block["tool_use_id"]
            if tool_use_id not in expected:
                raise invalid(
                    f"{path}: unexpected `tool_use_id` found in `tool_result` blocks: {tool_use_id}. "
                    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )
            if tool_use_id in results_seen:
                raise invalid(
                    f"{path}: each tool_use must have a single result. Found multiple `tool_result` blocks with id: "
                    f"{tool_use_id}"
                )
            results_seen.add(tool_use_id)


def _check_cache_control(block: Mapping[str, Any], path: str) -> None:
    cache_control = block.get("cache_control")
    if cache_control is None:
        return
    where = f"{path}.cache_control" if path else "cache_control"
    if not isinstance(cache_control, dict) or cache_control.get("type") != "ephemeral":
        raise invalid(f"{where}.type: Input should be 'ephemeral'")
    if cache_control.get("ttl", "5m") not in ("5m", "1h"):
        raise invalid(f"{where}.ttl: Input should be '5m' or '1h'")


def _check_cache_breakpoints(body: Mapping[str, Any], turns: list[_Turn]) -> None:
    if body.get("cache_control") is not None:
        _check_cache_control(body, "")
    count = sum(
        1 for block in _cacheable_blocks(body, turns) if block.get("cache_control") is not None
    )
    # Top-level (automatic) cache_control places one more breakpoint on the last block.
    count += 1 if body.get("cache_control") is not None else 0
    if count > MAX_CACHE_BREAKPOINTS:
        raise invalid(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {count}."
        )


def _cacheable_blocks(body: Mapping[str, Any], turns: list[_Turn]) -> Iterator[Mapping[str, Any]]:
    yield from body.get("tools") or []
    if isinstance(body.get("system"), list):
        yield from body["system"]
    for _, block in _all_blocks(turns):
        yield block
        if block["type"] == "tool_result" and isinstance(block.get("content"), list):
            yield from block["content"]


def _all_blocks(turns: list[_Turn]) -> Iterator[tuple[str, dict[str, Any]]]:
    for turn in turns:
        yield from turn.blocks
