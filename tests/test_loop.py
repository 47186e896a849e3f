"""The turn loop over the wire: the real SDK against the strict fake Messages API."""

from __future__ import annotations

import asyncio
import json
import time

from agent_core.events import (
    RunFailed,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from agent_core.loop import LoopConfig
from tests.fakes.anthropic_script import Error, RawToolUse, ToolUse, reply_text, reply_tools
from tests.harness import CoreHarness, make_harness


def finished(events: list) -> RunFinished:
    assert isinstance(events[0], RunStarted), events[0]
    assert isinstance(events[-1], RunFinished), events[-1]
    assert sum(isinstance(e, (RunFinished, RunFailed)) for e in events) == 1
    return events[-1]


def tool_results(request_json: dict) -> list[dict]:
    last = request_json["messages"][-1]
    return [b for b in last["content"] if b.get("type") == "tool_result"]


async def test_streams_text_and_finishes(core: CoreHarness) -> None:
    core.fake.script(reply_text("Hello there, this is a streamed answer."))
    events = await core.run("hi")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1, "the answer should arrive in several chunks"
    done = finished(events)
    assert done.text == "Hello there, this is a streamed answer."
    assert done.stop_reason == "end_turn" and done.turns == 1
    assert done.usage.input_tokens + done.usage.cache_creation_input_tokens > 0
    assert done.usage.output_tokens > 0


async def test_multi_turn_tool_use_feeds_results_back(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("big", {"count": 2}), text="Let me look."),
        reply_text("There were two lines."),
    )
    events = await core.run("count")
    done = finished(events)
    assert done.turns == 2 and done.text.endswith("There were two lines.")
    second = core.fake.requests[1].json
    results = tool_results(second)
    assert results and results[0]["content"] == "line 0\nline 1\n" and not results[0].get("is_error")
    # the next run's request carries the whole valid history (the strict fake accepts it)
    core.fake.script(reply_text("ok"))
    finished(await core.run("again"))
    assert core.fake.requests[-1].status == 200


async def test_max_turns_ends_with_honest_message(fake_api, tmp_path) -> None:
    harness = await make_harness(fake_api, tmp_path, config=LoopConfig(model="m", max_turns=3, loop_repeats=99))
    try:
        fake_api.responder = lambda body: reply_tools(ToolUse("big", {"count": len(body["messages"])}))
        done = finished(await harness.run("spin"))
        assert done.stop_reason == "max_turns" and done.turns == 3
        assert "Stopped after 3 steps" in done.text and "continue" in done.text
        assert len(fake_api.requests) == 3
    finally:
        await harness.llm.aclose()
        await harness.storage.aclose()


async def test_unknown_tool_and_invalid_input_are_error_results(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("nope", {}), ToolUse("sleep", {"seconds": "soon"})),
        reply_text("sorry"),
    )
    finished(await core.run("x"))
    results = tool_results(core.fake.requests[1].json)
    assert results[0]["is_error"] and "Unknown tool 'nope'" in results[0]["content"]
    assert "sleep" in results[0]["content"]  # lists what is available
    assert results[1]["is_error"] and "Invalid input for sleep" in results[1]["content"]
    assert "seconds" in results[1]["content"]


async def test_tool_timeout_and_exception_become_error_results(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("slow", {"seconds": 30}), ToolUse("boom", {"text": ""}), ToolUse("refuse", {"text": "x"})),
        reply_text("noted"),
    )
    started = time.monotonic()
    events = await core.run("x")
    assert time.monotonic() - started < 5
    finished(events)
    timeout, boom, refuse = tool_results(core.fake.requests[1].json)
    assert timeout["is_error"] and "timed out after 0.3 s" in timeout["content"]
    assert boom["is_error"] and "RuntimeError: kaboom" in boom["content"]
    assert refuse["is_error"] and refuse["content"] == "cannot do 'x'"
    errors = [e for e in events if isinstance(e, ToolFinished) and e.is_error]
    assert len(errors) == 3


async def test_independent_tools_run_concurrently_in_order(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("sleep", {"seconds": 1.0}), ToolUse("sleep", {"seconds": 1.0})),
        reply_text("done"),
    )
    events = await core.run("two naps")
    finished(events)
    # Overlap, told by the order of the events (each is emitted as it happens): both tools
    # started before either finished. Not by total time: a loaded machine stretches the
    # model round trips around the tools (a 1.8 s bound failed with hog threads at 1.88 s).
    kinds = [type(e).__name__ for e in events if isinstance(e, (ToolStarted, ToolFinished))]
    assert kinds == ["ToolStarted", "ToolStarted", "ToolFinished", "ToolFinished"], kinds
    results = tool_results(core.fake.requests[1].json)
    uses = [b for b in core.fake.requests[1].json["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]


async def test_big_output_is_cut_head_and_tail_with_note(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("big", {"count": 5000})), reply_text("ok"))
    finished(await core.run("dump"))
    content = tool_results(core.fake.requests[1].json)[0]["content"]
    assert len(content) <= 16_000
    assert content.startswith("line 0\n") and content.rstrip().endswith("line 4999")
    assert "characters omitted" in content


async def test_three_malformed_calls_then_clear_error(core: CoreHarness) -> None:
    core.fake.script(*[reply_tools(RawToolUse("big", '{"count": 3')) for _ in range(3)])
    events = await core.run("go")
    failed = events[-1]
    assert isinstance(failed, RunFailed) and "malformed" in failed.message
    assert len(core.fake.requests) == 3
    correction = tool_results(core.fake.requests[1].json)[0]
    assert correction["is_error"] and "not valid JSON" in correction["content"]
    # the transcript stays valid: the next run is accepted by the strict fake
    core.fake.script(reply_text("recovered"))
    assert finished(await core.run("again")).text == "recovered"


async def test_one_malformed_call_is_corrected_and_run_continues(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(RawToolUse("big", "[1, 2]")),
        reply_tools(ToolUse("big", {"count": 1})),
        reply_text("fine"),
    )
    done = finished(await core.run("go"))
    assert done.text == "fine" and done.turns == 3


async def test_repeated_identical_call_is_stopped_as_a_loop(core: CoreHarness) -> None:
    core.fake.responder = lambda body: reply_tools(ToolUse("big", {"count": 1}))
    done = finished(await core.run("loop"))
    assert done.stop_reason == "loop_detected"
    assert "same input" in done.text
    assert len(core.fake.requests) == 3


async def test_model_errors_end_the_run_with_a_clear_message(core: CoreHarness) -> None:
    core.fake.script(Error(429, retry_after=1))
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and "rate limiting" in failed.message
    core.fake.script(Error(529))
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and "overloaded" in failed.message
    core.fake.script(reply_text("back"))
    assert finished(await core.run("hi")).text == "back"


async def test_cancel_mid_tool_leaves_valid_transcript(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("sleep", {"seconds": 30})))
    started = asyncio.Event()

    async def on_event(event) -> None:
        if isinstance(event, ToolStarted):
            started.set()

    task = asyncio.create_task(core.run("nap", on_event=on_event))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    core.fake.script(reply_text("awake"))
    done = finished(await core.run("still there?"))
    assert done.text == "awake"
    last = core.fake.requests[-1]
    assert last.status == 200
    results = [b for m in last.json["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert results and results[0]["is_error"] and "Cancelled" in results[0]["content"]


async def test_crash_between_turns_is_repaired_on_next_run(core: CoreHarness) -> None:
    # What a crash leaves behind: a stored tool_use whose result was never written.
    await core.storage.ensure_session("main", "main")
    await core.storage.append_message("main", "r0", "user", [{"type": "text", "text": "do it"}])
    await core.storage.append_message(
        "main", "r0", "assistant", [{"type": "tool_use", "id": "toolu_crash", "name": "big", "input": {"count": 1}}]
    )
    core.fake.script(reply_text("resumed"))
    assert finished(await core.run("hello?")).text == "resumed"
    assert core.fake.requests[-1].status == 200


def stable_prefix_bytes(body: bytes) -> bytes:
    """The serialized stable system block, cut from the raw request body."""
    start = body.index(b'"system":[') + len(b'"system":[')
    end = body.index(b'"cache_control":{"type":"ephemeral"}}', start)
    return body[start:end]


def tools_bytes(body: bytes) -> bytes:
    start = body.index(b'"tools":')
    return body[start : body.index(b"]", body.rindex(b'"cache_control"')) + 1]


async def test_prompt_prefix_is_byte_identical_across_turns_and_runs(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("big", {"count": 1})), reply_text("one"), reply_text("two"))
    first = finished(await core.run("first"))
    second = finished(await core.run("second"))
    bodies = [r.body for r in core.fake.requests]
    assert len(bodies) == 3
    assert len({stable_prefix_bytes(b) for b in bodies}) == 1
    assert len({tools_bytes(b) for b in bodies}) == 1
    assert b"You are Roost" in stable_prefix_bytes(bodies[0])
    # the fake's prompt cache reports reads once the prefix was written
    assert first.usage.cache_read_input_tokens > 0  # turn 2 of the first run
    assert second.usage.cache_read_input_tokens > 0


async def test_stream_broken_mid_answer_fails_clearly_and_next_run_works(core: CoreHarness) -> None:
    from tests.fakes.anthropic_script import Disconnect, Reply, StreamError, Text

    core.fake.script(Reply(Text("partial answer"), Disconnect()))
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and "broke mid-answer" in failed.message
    core.fake.script(Reply(Text("half"), StreamError("overloaded_error", "Overloaded")))
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and "overloaded" in failed.message
    core.fake.script(reply_text("fine now"))
    assert finished(await core.run("hi")).text == "fine now"


async def test_fallback_model_is_used_on_overload_and_rate_limit(fake_api, tmp_path) -> None:
    from agent_core.failover import FailoverLLM
    from agent_core.retry import RetryPolicy

    harness = await make_harness(fake_api, tmp_path)
    harness.loop._llm = FailoverLLM(harness.llm, ["claude-backup"], retry=RetryPolicy(max_retries=0))
    try:
        fake_api.script(Error(529), reply_text("from backup"), Error(429, retry_after=1), reply_text("again backup"))
        done = finished(await harness.run("hi"))
        # The user is told a fallback answered (the note is shown, not stored).
        assert done.text == "from backup\n\n(answered by claude-backup: claude-test was overloaded)"
        assert done.model == "claude-backup"
        assert [r.json["model"] for r in fake_api.requests] == ["claude-test", "claude-backup"]
        done = finished(await harness.run("hi"))
        assert done.text == "again backup\n\n(answered by claude-backup: claude-test was rate limited)"
        assert fake_api.requests[-1].json["model"] == "claude-backup"
    finally:
        await harness.llm.aclose()
        await harness.storage.aclose()


async def test_internal_error_ends_the_run_visibly(core: CoreHarness) -> None:
    def broken(key, scope, at):  # noqa: ANN001, ANN202
        raise KeyError("boom")

    core.loop._context = broken
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and failed.kind == "internal_error"
    assert "internal error (KeyError)" in failed.message


async def test_missing_api_key_is_a_clear_error(fake_api) -> None:
    from agent_core.anthropic_llm import AnthropicLLM
    from agent_core.llm import LLMAuthError, LLMRequest

    llm = AnthropicLLM(api_key=None, base_url=fake_api.base_url)
    try:
        stream = llm.stream(LLMRequest("m", [], [], [{"role": "user", "content": "hi"}]))
        try:
            await stream.__anext__()
            raise AssertionError("expected LLMAuthError")
        except LLMAuthError as exc:
            assert "ANTHROPIC_API_KEY" in str(exc)
        assert fake_api.requests == []
    finally:
        await llm.aclose()


async def test_whitespace_only_text_never_wedges_the_session(core: CoreHarness) -> None:
    from tests.fakes.anthropic_script import Reply, Text

    core.fake.script(Reply(Text("\n\n"), ToolUse("big", {"count": 1})), reply_text("done"))
    assert finished(await core.run("go")).turns == 2
    core.fake.script(reply_text("still fine"))
    assert finished(await core.run("again")).text == "still fine"
    assert all(r.status == 200 for r in core.fake.requests)


async def test_long_history_is_windowed_not_rejected(fake_api, tmp_path) -> None:
    harness = await make_harness(fake_api, tmp_path, config=LoopConfig(model="m", history_budget_chars=2_000))
    try:
        for i in range(10):
            fake_api.script(reply_text(f"answer {i} " + "x" * 300))
            finished(await harness.run(f"question {i} " + "y" * 300))
        body = fake_api.requests[-1].json
        sent = json.dumps(body["messages"])
        assert "question 9" in sent and "question 0" not in sent
        assert body["messages"][0]["role"] == "user"
        assert fake_api.requests[-1].status == 200
    finally:
        await harness.llm.aclose()
        await harness.storage.aclose()
