"""The fake Messages API, exercised through the real anthropic SDK over real HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import (
    Disconnect,
    Error,
    RawToolUse,
    Reply,
    Stall,
    StreamError,
    Text,
    ToolUse,
    reply_text,
    reply_tools,
)

from tests.fake_anthropic_support import (  # noqa: F401  (fixtures are used by name)
    TOOLS,
    base_request,
    EPHEMERAL,
    MODEL,
    WEATHER_TOOL,
    async_sdk,
    client,
    fake,
    sync_sdk,
    tool_result,
    user,
)


# ---- streaming and plain answers ----------------------------------------------------------


async def test_stream_true_yields_real_event_sequence(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(reply_text("Hello there, this is a streamed answer.", chunk_size=10))

    stream = await client.messages.create(model=MODEL, max_tokens=64, messages=[user("hi")], stream=True)
    events = [event async for event in stream]

    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1] == "content_block_start" and kinds[-3] == "content_block_stop"
    deltas = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert deltas == ["Hello ther", "e, this is", " a streame", "d answer."]
    message_delta = events[-2]
    assert message_delta.type == "message_delta"
    assert message_delta.delta.stop_reason == "end_turn"
    assert message_delta.usage.output_tokens > 0
    assert events[0].type == "message_start" and events[0].message.model == MODEL


async def test_wire_format_has_ping_and_sse_framing(fake: FakeAnthropic) -> None:
    # The SDK swallows ping events, so look at the bytes themselves.
    body = {"model": MODEL, "max_tokens": 16, "messages": [user("hi")], "stream": True}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{fake.base_url}/v1/messages", json=body, headers=headers)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["request-id"].startswith("req_")
    names = [line.removeprefix("event: ") for line in response.text.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop",
    ]


async def test_stream_helper_accumulates_text(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(reply_text("streamed through the helper", chunk_size=5))

    async with client.messages.stream(model=MODEL, max_tokens=64, messages=[user("hi")]) as stream:
        chunks = [chunk async for chunk in stream.text_stream]
        final = await stream.get_final_message()

    assert "".join(chunks) == "streamed through the helper" and len(chunks) == 6
    assert final.content[0].type == "text" and final.content[0].text == "streamed through the helper"
    assert final.stop_reason == "end_turn"
    assert fake.requests[0].headers["x-stainless-helper-method"] == "stream"


async def test_non_streaming_returns_message(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Reply(Text("first"), Text("second"), stop_reason="max_tokens", usage={"output_tokens": 99}))

    message = await client.messages.create(model=MODEL, max_tokens=64, messages=[user("hi")])

    assert [b.text for b in message.content if b.type == "text"] == ["first", "second"]
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 99
    assert message.id.startswith("msg_") and message.model == MODEL


def test_sync_client_from_sync_test(fake: FakeAnthropic) -> None:
    with sync_sdk(fake) as sync_client:
        message = sync_client.messages.create(model=MODEL, max_tokens=16, messages=[user("from a sync test")])
    assert message.content[0].type == "text" and message.content[0].text == "echo: from a sync test"


def test_subprocess_can_use_the_fake(fake: FakeAnthropic) -> None:
    # Plain urllib keeps this fast: importing the SDK in a child costs ~2 s.
    code = (
        "import json, sys, urllib.request\n"
        "req = urllib.request.Request(sys.argv[1] + '/v1/messages', method='POST', data=json.dumps("
        "{'model': 'm', 'max_tokens': 8, 'messages': [{'role': 'user', 'content': 'from a child'}]}).encode(),"
        " headers={'x-api-key': 'k', 'anthropic-version': '2023-06-01', 'content-type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(req))['content'][0]['text'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code, fake.base_url], capture_output=True, text=True, timeout=10)
    assert result.stdout.strip() == "echo: from a child", result.stderr


# ---- tools ----------------------------------------------------------------------------------


async def test_tool_use_round_trip(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(
        reply_tools(ToolUse("get_weather", {"city": "Paris"}), text="Let me check."),
        reply_text("It is sunny in Paris."),
    )
    messages: list[dict[str, Any]] = [user("Weather in Paris?")]

    async with client.messages.stream(model=MODEL, max_tokens=256, messages=messages, tools=[WEATHER_TOOL]) as stream:
        first = await stream.get_final_message()
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [tool_result(use.id, "22C and sunny")]},
    ]
    second = await client.messages.create(model=MODEL, max_tokens=256, messages=messages, tools=[WEATHER_TOOL])

    assert second.content[0].type == "text" and second.content[0].text == "It is sunny in Paris."
    recorded = fake.wait_for_requests(2)
    assert [r.status for r in recorded] == [200, 200]
    served = recorded[0].served
    assert isinstance(served, Reply) and isinstance(served.parts[1], ToolUse) and served.parts[1].id == use.id
    assert fake.pending_scripts == 0


async def test_raw_malformed_tool_json_is_delivered_verbatim(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    raw = '{"city": "Par'  # cut off mid-string, as a model that hit max_tokens would leave it
    fake.script(Reply(RawToolUse("get_weather", raw, chunk_size=3)))

    stream = await client.messages.create(
        model=MODEL, max_tokens=64, messages=[user("hi")], tools=[WEATHER_TOOL], stream=True
    )
    events = [event async for event in stream]

    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert pieces[0] == ""  # the real service opens every tool input with an empty delta
    assert "".join(pieces) == raw
    start = next(e for e in events if e.type == "content_block_start")
    assert start.content_block.type == "tool_use" and start.content_block.input == {}


async def test_stream_helper_raises_plain_valueerror_on_malformed_tool_json(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.script(Reply(RawToolUse("get_weather", '{"city": Paris}')))

    with pytest.raises(ValueError, match="Unable to parse tool parameter JSON") as caught:
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=[user("hi")], tools=[WEATHER_TOOL]) as stream:
            async for _ in stream:
                pass
    assert not isinstance(caught.value, anthropic.APIError)


async def test_stream_helper_silently_drops_truncated_tool_json(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # jiter's partial mode accepts a truncated document and drops the unfinished value.
    fake.script(Reply(RawToolUse("get_weather", '{"city": "Paris", "days": tru')))

    async with client.messages.stream(model=MODEL, max_tokens=64, messages=[user("hi")], tools=[WEATHER_TOOL]) as stream:
        final = await stream.get_final_message()

    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "Paris"}


# ---- headers and errors ------------------------------------------------------------------------


async def test_missing_credentials_get_401(fake: FakeAnthropic) -> None:
    headers = {"anthropic-version": "2023-06-01", "x-api-key": ""}
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{fake.base_url}/v1/messages", json=base_request(), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == {"type": "authentication_error", "message": "x-api-key header is required"}
    assert response.json()["type"] == "error" and response.headers["request-id"].startswith("req_")


async def test_wrong_key_raises_authentication_error() -> None:
    with FakeAnthropic(api_key="right-key") as fake:
        async with async_sdk(fake, api_key="wrong-key") as sdk:
            with pytest.raises(anthropic.AuthenticationError):
                await sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])


async def test_missing_anthropic_version_gets_400(fake: FakeAnthropic) -> None:
    async with async_sdk(fake, default_headers={"anthropic-version": anthropic.Omit()}) as sdk:
        with pytest.raises(anthropic.BadRequestError, match="anthropic-version: header is required"):
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])


async def test_429_with_retry_after_raises_rate_limit_error(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Error(429, retry_after=7))

    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert caught.value.request_id is not None and caught.value.request_id.startswith("req_")


async def test_sdk_retries_honour_retry_after(fake: FakeAnthropic) -> None:
    fake.script(Error(429, retry_after=0.01), Error(529, retry_after=0.01), reply_text("third time lucky"))

    async with async_sdk(fake, max_retries=2) as sdk:
        message = await sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])

    assert message.content[0].type == "text" and message.content[0].text == "third time lucky"
    recorded = fake.requests
    assert [r.status for r in recorded] == [429, 529, 200]
    assert [r.headers["x-stainless-retry-count"] for r in recorded] == ["0", "1", "2"]


async def test_overloaded_and_server_errors_map_to_sdk_types(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Error(529), Error(500))
    with pytest.raises(anthropic.OverloadedError):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    with pytest.raises(anthropic.InternalServerError, match="Internal server error"):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])


async def test_stream_error_event_mid_answer_is_a_bare_api_status_error(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # The HTTP status was 200, so the SDK cannot pick OverloadedError: match on the body.
    fake.script(Reply(Text("partial answer"), StreamError("overloaded_error", "Overloaded")))
    seen: list[str] = []

    with pytest.raises(anthropic.APIStatusError) as caught:
        stream = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")], stream=True)
        async for event in stream:
            seen.append(event.type)

    assert "content_block_delta" in seen
    assert type(caught.value) is anthropic.APIStatusError and caught.value.status_code == 200
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    # The fake records the error once its stream has ended: the client can see it first.
    await fake.await_until(lambda requests: requests[0].error == "Overloaded", what="the stream's error recorded")


async def test_disconnect_before_response_is_connection_error(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Disconnect())
    with pytest.raises(anthropic.APIConnectionError):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert fake.requests[0].status is None


async def test_disconnect_mid_stream_surfaces_as_raw_httpx2_error(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    # Not wrapped by the SDK: error translation must catch httpx2.TransportError too.
    fake.script(Reply(Text("half an ans"), Disconnect(), Text("wer")))

    with pytest.raises(httpx2.RemoteProtocolError) as caught:
        stream = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")], stream=True)
        async for _ in stream:
            pass
    assert not isinstance(caught.value, anthropic.APIError)


async def test_stall_trips_client_timeout(fake: FakeAnthropic) -> None:
    fake.script(Stall())
    async with async_sdk(fake, timeout=0.2) as sdk:
        with pytest.raises(anthropic.APITimeoutError):
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])


def test_close_releases_a_stalled_request() -> None:
    fake = FakeAnthropic().start()
    fake.script(Stall())
    done = threading.Event()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            with sync_sdk(fake, api_key="k") as sdk:
                sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=call)
    thread.start()
    try:
        fake.wait_for_requests(1)
    finally:
        fake.close()
    assert done.wait(timeout=5)
    thread.join()
    assert isinstance(outcome[0], anthropic.APIConnectionError)


# ---- scripting, echo, concurrency --------------------------------------------------------------


async def test_echo_responder_serves_many_concurrent_sessions(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    async def session(n: int) -> str:
        async with client.messages.stream(model=MODEL, max_tokens=32, messages=[user(f"session {n}")]) as stream:
            return await stream.get_final_text()

    answers = await asyncio.gather(*(session(n) for n in range(20)))

    assert answers == [f"echo: session {n}" for n in range(20)]
    assert len(await fake.await_requests(20)) == 20


async def test_script_when_routes_answers_by_predicate(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    def from_session(name: str) -> Callable[[dict[str, Any]], bool]:
        return lambda body: body.get("metadata", {}).get("user_id") == name

    fake.script_when(from_session("alice"), reply_text("for alice 1"), reply_text("for alice 2"))
    fake.script_when(from_session("bob"), reply_text("for bob"))
    fake.script(reply_text("unkeyed"))

    async def ask(name: str) -> str:
        message = await client.messages.create(
            model=MODEL, max_tokens=8, messages=[user("x")], metadata={"user_id": name}
        )
        return message.content[0].text if message.content[0].type == "text" else ""

    assert await asyncio.gather(ask("bob"), ask("alice")) == ["for bob", "for alice 1"]
    assert await ask("carol") == "unkeyed"
    assert await ask("alice") == "for alice 2"
    assert await ask("bob") == "echo: x"


async def test_custom_responder_sees_request_json(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.responder = lambda body: f"{len(body['messages'])} messages"
    message = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("a"), user("b")])
    assert message.content[0].type == "text" and message.content[0].text == "2 messages"


async def test_failing_responder_answers_500_without_retry_hint(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    def broken(body: dict[str, Any]) -> str:
        raise KeyError("oops")

    fake.responder = broken
    with pytest.raises(anthropic.InternalServerError, match="fake responder raised KeyError"):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert fake.requests[0].status == 500


async def test_await_requests_times_out_without_blocking_the_loop(fake: FakeAnthropic) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        with pytest.raises(TimeoutError, match="waited 0.05s for 1 requests"):
            await fake.await_requests(1, timeout=0.05)
    finally:
        task.cancel()
    assert ticks > 1


def test_wait_for_requests_wakes_when_another_thread_calls(fake: FakeAnthropic) -> None:
    def call() -> None:
        with sync_sdk(fake, api_key="k") as sdk:
            sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("from a thread")])

    thread = threading.Thread(target=call)
    thread.start()
    recorded = fake.wait_for_requests(1, timeout=5)
    thread.join()
    first = recorded[0]
    assert first.path == "/v1/messages" and first.json["messages"][0]["content"] == "from a thread"
    assert json.loads(first.body) == first.json
    assert first.headers["anthropic-version"] and first.headers["authorization"] == "Bearer k"


async def test_reset_forgets_requests_scripts_and_cache(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(reply_text("scripted"))
    await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    fake.script(reply_text("left over"))

    fake.reset()

    assert fake.requests == [] and fake.pending_scripts == 0
    message = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert message.content[0].type == "text" and message.content[0].text == "echo: x"


# ---- usage and prompt caching ------------------------------------------------------------------

LONG_SYSTEM = [{"type": "text", "text": "You are Roost. " * 100, "cache_control": EPHEMERAL}]


async def test_repeated_cached_prefix_is_reported_as_cache_read(client: anthropic.AsyncAnthropic) -> None:
    async def ask(text: str) -> anthropic.types.Usage:
        async with client.messages.stream(
            model=MODEL, max_tokens=32, system=LONG_SYSTEM, tools=TOOLS, messages=[user(text)]
        ) as stream:
            return (await stream.get_final_message()).usage

    first = await ask("first question")
    second = await ask("a different question")

    assert first.cache_creation_input_tokens and first.cache_creation_input_tokens > 350
    assert first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens > 0  # the uncached tail: the user message


async def test_moving_breakpoint_reads_the_earlier_prefix(client: anthropic.AsyncAnthropic) -> None:
    def turn(text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text, "cache_control": EPHEMERAL}]}

    history: list[dict[str, Any]] = [turn("tell me a long story " * 20)]
    first = await client.messages.create(model=MODEL, max_tokens=32, messages=history)
    assert first.content[0].type == "text"
    history = [
        {"role": "user", "content": [{"type": "text", "text": "tell me a long story " * 20}]},
        {"role": "assistant", "content": first.content[0].text},
        turn("go on"),
    ]
    second = await client.messages.create(model=MODEL, max_tokens=32, messages=history)

    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens and second.usage.cache_creation_input_tokens > 0


async def test_count_tokens_matches_request_size(client: anthropic.AsyncAnthropic) -> None:
    counted = await client.messages.count_tokens(model=MODEL, system=LONG_SYSTEM, messages=[user("hi")])
    served = await client.messages.create(model=MODEL, max_tokens=8, system=LONG_SYSTEM, messages=[user("hi")])

    usage = served.usage
    total = usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert counted.input_tokens == total > 350


# ---- connection lifecycle ----------------------------------------------------------------------


async def test_cancelled_stream_is_recorded_as_client_disconnected(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.script(Reply(Text("first part"), Stall(), Text("never sent")))

    stream = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")], stream=True)
    async for event in stream:
        if event.type == "content_block_delta":
            break
    await stream.close()

    recorded = await fake.await_until(lambda rs: rs[0].outcome == "client_disconnected", what="the hang-up")
    assert recorded[0].status == 200


async def test_wrong_base_url_path_gets_real_shaped_404(fake: FakeAnthropic) -> None:
    async with async_sdk(fake, base_url=f"{fake.base_url}/v1") as sdk:
        with pytest.raises(anthropic.NotFoundError, match="/v1/v1/messages"):
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert fake.requests[0].path == "/v1/v1/messages" and fake.requests[0].status == 404
