"""The fake Messages API enforces the service's limits that wedge sessions — the context window
and unique tool_use ids — and can number tool ids per response like some compatible
endpoints, all through the real anthropic SDK over real HTTP."""

from __future__ import annotations

import anthropic
import pytest

from tests.fake_anthropic_support import (  # noqa: F401  (fixtures are used by name)
    MODEL,
    TOOLS,
    async_sdk,
    client,
    fake,
    tool_result,
    tool_use,
    user,
)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools


async def test_prompt_over_the_context_window_is_refused_like_the_service() -> None:
    with FakeAnthropic(context_window_tokens=100) as server:
        sdk = async_sdk(server)
        try:
            short = [user("hi")]
            counted = (await sdk.messages.count_tokens(model=MODEL, messages=short)).input_tokens
            server.script(reply_text("fits"))
            answer = await sdk.messages.create(model=MODEL, max_tokens=16, messages=short)
            assert answer.content[0].text == "fits" and counted <= 100
            long = [user("x" * 1_000)]
            counted = (await sdk.messages.count_tokens(model=MODEL, messages=long)).input_tokens
            with pytest.raises(anthropic.BadRequestError) as caught:
                await sdk.messages.create(model=MODEL, max_tokens=16, messages=long)
            assert caught.value.body["error"] == {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {counted} tokens > 100 maximum",
            }
            assert server.pending_scripts == 0 and server.requests[-1].status == 400
            server.context_window_tokens = None  # adjustable at run time
            server.script(reply_text("no limit"))
            assert (await sdk.messages.create(model=MODEL, max_tokens=16, messages=long)).content[0].text == "no limit"
        finally:
            await sdk.close()


async def test_numbered_tool_ids_repeat_in_every_response() -> None:
    with FakeAnthropic(tool_ids="numbered") as server:
        sdk = async_sdk(server)
        try:
            for _ in range(2):
                server.script(reply_tools(ToolUse("get_weather", {"city": "A"}), ToolUse("get_weather", {"city": "B"})))
                message = await sdk.messages.create(model=MODEL, max_tokens=64, messages=[user("hi")], tools=TOOLS)
                assert [b.id for b in message.content if b.type == "tool_use"] == ["toolu_1", "toolu_2"]
        finally:
            await sdk.close()


async def test_tool_use_ids_must_be_unique_across_the_whole_request(client: anthropic.AsyncAnthropic) -> None:
    messages = [
        user("one"),
        {"role": "assistant", "content": [tool_use("toolu_1")]},
        {"role": "user", "content": [tool_result("toolu_1")]},
        {"role": "assistant", "content": [tool_use("toolu_1", "Rome")]},
        {"role": "user", "content": [tool_result("toolu_1")]},
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model=MODEL, max_tokens=16, messages=messages, tools=TOOLS)
    assert caught.value.body["error"]["message"] == "messages.3.content.0: `tool_use` ids must be unique"
