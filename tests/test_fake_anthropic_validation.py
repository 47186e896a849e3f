"""The fake Messages API rejects what the real service rejects, with its messages, and
accepts what it accepts — exercised through the real anthropic SDK over real HTTP."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import anthropic
from anthropic.types import Message
import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fake_anthropic_support import (  # noqa: F401  (fixtures are used by name)
    TOOLS,
    base_request,
    EPHEMERAL,
    WEATHER_TOOL,
    client,
    fake,
    tool_result,
    tool_use,
    user,
)


# ---- validation --------------------------------------------------------------------------------


def _with(**changes: Any) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        body = base_request()
        for key, value in changes.items():
            if value is _DROP:
                del body[key]
            else:
                body[key] = copy.deepcopy(value)
        return body

    return build


_DROP = object()
_JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 16


def _image(media_type: str, raw: bytes) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": base64.b64encode(raw).decode()}}


def _pdf(raw: bytes) -> dict[str, Any]:
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": base64.b64encode(raw).decode()}}

REJECTED: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "missing_model": (_with(model=_DROP), "model: Field required"),
    "missing_max_tokens": (_with(max_tokens=_DROP), "max_tokens: Field required"),
    "zero_max_tokens": (_with(max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
    "string_max_tokens": (_with(max_tokens="32"), "max_tokens: Input should be a valid integer"),
    "missing_messages": (_with(messages=_DROP), "messages: Field required"),
    "empty_messages": (_with(messages=[]), "messages: List should have at least 1 item"),
    "system_role_in_messages": (
        _with(messages=[{"role": "system", "content": "x"}]),
        "messages.0.role: Input should be 'user' or 'assistant'",
    ),
    "first_message_assistant": (
        _with(messages=[{"role": "assistant", "content": "hi"}, user("x")]),
        'first message must use the "user" role',
    ),
    "tool_use_without_result": (
        _with(tools=TOOLS, messages=[user("x"), {"role": "assistant", "content": [tool_use("toolu_a")]}, user("next")]),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a.",
    ),
    "tool_use_result_two_turns_later": (
        _with(tools=TOOLS, messages=[
            user("x"), {"role": "assistant", "content": [tool_use("toolu_a")]},
            user("interruption"), {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [tool_result("toolu_a")]},
        ]),
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_a",
    ),
    "tool_result_without_use": (
        _with(tools=TOOLS, messages=[user("x"), {"role": "assistant", "content": "ok"},
                                      {"role": "user", "content": [tool_result("toolu_zzz")]}]),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_zzz",
    ),
    "tool_result_wrong_id": (
        _with(tools=TOOLS, messages=[
            user("x"), {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")]},
            {"role": "user", "content": [tool_result("toolu_a"), tool_result("toolu_b"), tool_result("toolu_c")]},
        ]),
        "unexpected `tool_use_id` found in `tool_result` blocks: toolu_c",
    ),
    "text_before_tool_result": (
        _with(tools=TOOLS, messages=[
            user("x"), {"role": "assistant", "content": [tool_use("toolu_a")]},
            {"role": "user", "content": [{"type": "text", "text": "here"}, tool_result("toolu_a")]},
        ]),
        "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message",
    ),
    "text_before_tool_result_after_merging": (
        _with(tools=TOOLS, messages=[
            user("x"), {"role": "assistant", "content": [tool_use("toolu_a")]},
            user("a separate message, merged first"), {"role": "user", "content": [tool_result("toolu_a")]},
        ]),
        "Did not find 1 `tool_result` block(s) at the beginning of this message",
    ),
    "duplicate_tool_use_ids": (
        _with(tools=TOOLS, messages=[
            user("x"), {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_a")]},
            {"role": "user", "content": [tool_result("toolu_a")]},
        ]),
        "messages.1.content.1: `tool_use` ids must be unique",
    ),
    "tool_blocks_without_tools": (
        _with(messages=[user("x"), {"role": "assistant", "content": [tool_use("toolu_a")]},
                        {"role": "user", "content": [tool_result("toolu_a")]}]),
        "Requests which include `tool_use` or `tool_result` blocks must define tools.",
    ),
    "empty_text_block": (
        _with(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "messages: text content blocks must be non-empty",
    ),
    "empty_string_content": (_with(messages=[user("")]), "messages: text content blocks must be non-empty"),
    "whitespace_text_block": (
        _with(messages=[user("  \n")]), "messages: text content blocks must contain non-whitespace text"
    ),
    "empty_content_list": (
        _with(messages=[{"role": "user", "content": []}]),
        "messages.0: all messages must have non-empty content except for the optional final assistant message",
    ),
    "unknown_block_type": (
        _with(messages=[{"role": "user", "content": [{"type": "txt", "text": "x"}]}]),
        "messages.0.content.0: Input tag 'txt' found using 'type' does not match any of the expected tags",
    ),
    "openai_style_message_field": (
        _with(messages=[{"role": "user", "content": "x", "name": "bob"}]),
        "messages.0.name: Extra inputs are not permitted",
    ),
    "unknown_top_level_field": (_with(system_prompt="x"), "system_prompt: Extra inputs are not permitted"),
    "final_assistant_trailing_whitespace": (
        _with(messages=[user("x"), {"role": "assistant", "content": "The answer is "}]),
        "messages: final assistant content cannot end with trailing whitespace",
    ),
    "bad_tool_name": (
        _with(tools=[{**WEATHER_TOOL, "name": "get weather"}]),
        "tools.0.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
    ),
    "tool_name_too_long": (_with(tools=[{**WEATHER_TOOL, "name": "x" * 129}]), "tools.0.name: String should match"),
    "duplicate_tool_names": (_with(tools=[WEATHER_TOOL, WEATHER_TOOL]), "tools: Tool names must be unique."),
    "schema_not_object": (
        _with(tools=[{**WEATHER_TOOL, "input_schema": {"type": "string"}}]),
        "tools.0.input_schema.type: Input should be 'object'",
    ),
    "schema_missing": (_with(tools=[{"name": "t"}]), "tools.0.input_schema: Field required"),
    "five_cache_breakpoints": (
        _with(
            tools=[{**WEATHER_TOOL, "cache_control": EPHEMERAL}],
            system=[{"type": "text", "text": "a", "cache_control": EPHEMERAL},
                    {"type": "text", "text": "b", "cache_control": EPHEMERAL}],
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "c", "cache_control": EPHEMERAL},
                {"type": "text", "text": "d", "cache_control": EPHEMERAL},
            ]}],
        ),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    "system_block_not_text": (
        _with(system=[{"type": "image", "source": {}}]), "system.0.type: Input should be 'text'"
    ),
    "system_block_empty": (
        _with(system=[{"type": "text", "text": ""}]), "system: text content blocks must be non-empty"
    ),
    "image_bytes_do_not_match_media_type": (
        _with(messages=[{"role": "user", "content": [_image("image/png", _JPEG)]}]),
        "Image does not match the provided media type image/png",
    ),
    "image_unsupported_media_type": (
        _with(messages=[{"role": "user", "content": [_image("image/bmp", b"BM..")]}]),
        "media_type: Input should be 'image/jpeg'",
    ),
    "image_not_base64": (
        _with(messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "not base64!"}}]}]),
        "invalid base64 data",
    ),
    "document_not_a_pdf": (
        _with(messages=[{"role": "user", "content": [_pdf(b"hello")]}]), "The PDF specified was not valid",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
async def test_invalid_request_is_rejected_with_400(
    case: str, fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    build, expected = REJECTED[case]
    fake.script(reply_text("must not be consumed by an invalid request"))

    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.post("/v1/messages", body=build(), cast_to=Message)

    assert expected in caught.value.message
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert fake.requests[0].status == 400 and fake.pending_scripts == 1


ACCEPTED: dict[str, dict[str, Any]] = {
    "consecutive_user_messages_merge": {"messages": [user("one"), user("two")]},
    "prefill_final_assistant": {"messages": [user("x"), {"role": "assistant", "content": "The answer is"}]},
    "empty_final_assistant": {"messages": [user("x"), {"role": "assistant", "content": []}]},
    "system_as_blocks": {"system": [{"type": "text", "text": "be brief", "cache_control": EPHEMERAL}]},
    "tool_uses_split_over_merged_assistant_messages": {
        "tools": TOOLS,
        "messages": [
            user("x"),
            {"role": "assistant", "content": [{"type": "text", "text": "checking"}]},
            {"role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b", "Rome")]},
            {"role": "user", "content": [tool_result("toolu_b")]},
            {"role": "user", "content": [tool_result("toolu_a"), {"type": "text", "text": "and thanks"}]},
        ],
    },
    "image_and_pdf_blocks": {"messages": [{"role": "user", "content": [
        _image("image/jpeg", _JPEG), _pdf(b"%PDF-1.4\n"), {"type": "text", "text": "what are these?"}]}]},
    "four_cache_breakpoints": {
        "tools": [{**WEATHER_TOOL, "cache_control": EPHEMERAL}],
        "system": [{"type": "text", "text": "a", "cache_control": EPHEMERAL}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "c", "cache_control": EPHEMERAL},
            {"type": "text", "text": "d", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ]}],
    },
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
async def test_valid_request_is_accepted(case: str, client: anthropic.AsyncAnthropic) -> None:
    message = await client.post("/v1/messages", body={**base_request(), **ACCEPTED[case]}, cast_to=Message)
    assert message.stop_reason == "end_turn"
