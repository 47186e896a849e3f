"""The fake Messages API is as strict as today's service about models: a model that refuses
prefill answers a trailing assistant message with the service's exact 400, per-model windows
and output limits are enforced, parameters a model rejects are refused, every stop reason
(and an unknown one) reaches the SDK, and ``GET /v1/models`` lists what it serves — all
through the real anthropic SDK over real HTTP."""

from __future__ import annotations

import anthropic
import pytest

from tests.fake_anthropic_support import async_sdk, client, fake, user  # noqa: F401  (fixtures)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_models import PREFILL_REFUSED, FakeModel
from tests.fakes.anthropic_script import Text, Reply, reply_text

NEW, OLD = "claude-sonnet-5-5", "claude-haiku-4-5"  # OLD still accepts prefill


async def _rejected(sdk: anthropic.AsyncAnthropic, **kwargs: object) -> dict[str, str]:
    with pytest.raises(anthropic.APIStatusError) as caught:
        await sdk.messages.create(**{"max_tokens": 16, **kwargs})  # type: ignore[arg-type]
    return caught.value.body["error"]


async def test_prefill_on_a_model_that_refuses_it_gets_the_services_exact_400(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    prefilled = [user("hi"), {"role": "assistant", "content": "The answer is"}]
    error = await _rejected(client, model=NEW, messages=prefilled)
    assert error == {"type": "invalid_request_error", "message": PREFILL_REFUSED}
    assert PREFILL_REFUSED == (
        "This model does not support assistant message prefill. The conversation must end with a user message."
    )
    # Nothing was consumed by the refused request; an older model still accepts the prefill.
    fake.script(reply_text(" 42."))
    answer = await client.messages.create(model=OLD, max_tokens=16, messages=prefilled)  # type: ignore[arg-type]
    assert answer.content[0].text == " 42."  # type: ignore[union-attr]
    # Streaming requests are refused the same way.
    with pytest.raises(anthropic.BadRequestError) as caught:
        async with client.messages.stream(model=NEW, max_tokens=16, messages=prefilled) as stream:  # type: ignore[arg-type]
            await stream.get_final_message()
    assert caught.value.body["error"]["message"] == PREFILL_REFUSED


async def test_per_model_output_limit_window_and_rejected_parameters(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.models["tiny"] = FakeModel("tiny", "Tiny", context_window=50, max_output_tokens=100, temperature=False,
                                    thinking=False)
    error = await _rejected(client, model="tiny", max_tokens=101, messages=[user("hi")])
    assert error["message"] == "max_tokens: 101 > 100, which is the maximum allowed number of output tokens for tiny"
    error = await _rejected(client, model="tiny", messages=[user("x" * 400)])
    assert error["message"].startswith("prompt is too long: ") and error["message"].endswith("> 50 maximum")
    # SDK 2.14 has no `temperature` argument any more; a client sending it raw is refused.
    error = await _rejected(client, model="tiny", extra_body={"temperature": 0.5}, messages=[user("hi")])
    assert error["message"].startswith("temperature: ")
    error = await _rejected(client, model="tiny", thinking={"type": "adaptive"}, messages=[user("hi")])
    assert error["message"].startswith("thinking: ")
    # The newest family has a 1M window: 400k tokens of prompt fit.
    fake.script(reply_text("fits"))
    big = await client.messages.create(model=NEW, max_tokens=16, messages=[user("y" * 1_600_000)])
    assert big.content[0].text == "fits"  # type: ignore[union-attr]
    error = await _rejected(client, model="claude-haiku-5-5", messages=[user("y" * 1_600_000)])
    assert error["message"].endswith("> 200000 maximum")


@pytest.mark.parametrize(
    "stop_reason",
    ["end_turn", "tool_use", "max_tokens", "pause_turn", "refusal", "model_context_window_exceeded", "stop_sequence",
     "brand_new_reason"],
)
async def test_every_stop_reason_reaches_the_sdk(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, stop_reason: str
) -> None:
    fake.script(Reply(Text("partial"), stop_reason=stop_reason), Reply(Text("partial"), stop_reason=stop_reason))
    message = await client.messages.create(model=NEW, max_tokens=16, messages=[user("hi")])
    assert message.stop_reason == stop_reason
    async with client.messages.stream(model=NEW, max_tokens=16, messages=[user("hi")]) as stream:
        streamed = await stream.get_final_message()
    assert streamed.stop_reason == stop_reason


async def test_models_endpoint_lists_and_retrieves_what_the_fake_serves(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    listed = [m.id async for m in client.models.list()]
    assert NEW in listed and "claude-opus-4-8" in listed and listed[0].endswith("-5-5")
    info = await client.models.retrieve(NEW)
    assert info.max_input_tokens == 1_000_000 and info.display_name == "Claude Sonnet 5.5"
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.models.retrieve("claude-nonsense-9")
    assert caught.value.body["error"] == {"type": "not_found_error", "message": "model: claude-nonsense-9"}


async def test_unknown_model_is_refused_when_strict() -> None:
    with FakeAnthropic(strict_models=True, api_key="right") as server:
        sdk = async_sdk(server, api_key="right")
        wrong = async_sdk(server, api_key="wrong")
        try:
            with pytest.raises(anthropic.NotFoundError):
                await sdk.messages.create(model="claude-nonsense-9", max_tokens=16, messages=[user("hi")])
            with pytest.raises(anthropic.AuthenticationError):
                await wrong.models.retrieve(NEW)
        finally:
            await sdk.close()
            await wrong.close()


async def test_thinking_streams_with_a_signature_and_an_altered_or_dropped_block_is_refused(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    from tests.fake_anthropic_support import TOOLS
    from tests.fakes.anthropic_script import Thinking, ToolUse

    fake.script(Reply(Thinking("Weather first, then answer.", chunk_size=8), ToolUse("get_weather", {"city": "Oslo"})))
    thinking = {"type": "adaptive", "display": "summarized"}
    async with client.messages.stream(
        model=NEW, max_tokens=2000, messages=[user("weather?")], tools=TOOLS, thinking=thinking  # type: ignore[arg-type]
    ) as stream:
        kinds = [event.delta.type async for event in stream if event.type == "content_block_delta"]
        served = await stream.get_final_message()
    assert kinds.count("thinking_delta") >= 2 and kinds.count("signature_delta") == 1
    block, call = served.content
    assert block.type == "thinking" and block.thinking == "Weather first, then answer." and block.signature
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}  # type: ignore[union-attr]
    turn = [block.model_dump(), call.model_dump()]

    def loop(assistant: list) -> list:
        return [user("weather?"), {"role": "assistant", "content": assistant}, result]

    altered = [{**turn[0], "thinking": "Something else."}, turn[1]]
    error = await _rejected(client, model=NEW, max_tokens=2000, tools=TOOLS, thinking=thinking, messages=loop(altered))
    assert error["message"] == "messages.1.content.0: Invalid `signature` in `thinking` block"
    error = await _rejected(client, model=NEW, max_tokens=2000, tools=TOOLS, thinking=thinking, messages=loop(turn[1:]))
    assert error["message"].startswith("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`")
    fake.script(reply_text("Sunny in Oslo."))
    answer = await client.messages.create(model=NEW, max_tokens=2000, tools=TOOLS, thinking=thinking, messages=loop(turn))  # type: ignore[arg-type]
    assert answer.content[0].text == "Sunny in Oslo."  # type: ignore[union-attr]
