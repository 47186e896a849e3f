"""Model faults over the wire: the real SDK against the strict fake Messages API, through the
real turn loop and storage. Every fault ends in a complete answer or a clear error, the
stored transcript stays valid (the fake answers an invalid one with 400), and no text the user
saw is shown twice. Backoff sleeps and the breakers' clock are injected: no test waits them."""

from __future__ import annotations

from agent_core.events import RunFailed
from tests.failover_rig import (
    ANSWER,
    BACKUP,
    PRIMARY,
    Rig,
    assert_next_run_is_valid,
    continue_answer,
    finished,
    make_rig,
    rig,  # noqa: F401  (fixture)
    shown_before_continuing,
)
from tests.fakes.anthropic_script import (
    Disconnect,
    Error,
    Reply,
    Stall,
    StreamError,
    Text,
    Truncate,
    reply_text,
)


# ---- retries on the same model ---------------------------------------------------------


async def test_429_waits_what_retry_after_asked_then_answers(rig: Rig) -> None:
    rig.core.fake.script(Error(429, retry_after=7), reply_text(ANSWER))
    events, visible = await rig.run()
    assert finished(events).text == ANSWER and visible == ANSWER
    # retry-after 7 s, plus a quarter of the first backoff step as jitter (rand = 1.0)
    assert rig.sleeps.asked == [7.25]
    assert [r.json["model"] for r in rig.core.fake.requests] == [PRIMARY, PRIMARY]
    await assert_next_run_is_valid(rig)


async def test_retry_after_over_an_hour_is_capped_at_a_minute(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, fallbacks=())
    try:
        fake_api.script(Error(429, retry_after=3600), reply_text(ANSWER))
        events, _ = await rig.run()
        assert finished(events).text == ANSWER
        assert rig.sleeps.asked == [60.0]
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_500_backs_off_exponentially_then_answers(rig: Rig) -> None:
    rig.core.fake.script(Error(500), Error(500), reply_text(ANSWER))
    events, visible = await rig.run()
    assert finished(events).text == ANSWER and visible == ANSWER
    assert rig.sleeps.asked == [1.0, 2.0]  # base 1 s doubling, full jitter at its top (rand = 1.0)
    await assert_next_run_is_valid(rig)


async def test_long_retry_after_goes_to_the_fallback_instead_of_waiting(rig: Rig) -> None:
    rig.core.fake.script(Error(429, retry_after=45), reply_text(ANSWER))
    events, visible = await rig.run()
    assert finished(events).model == BACKUP
    assert rig.sleeps.asked == []  # the backup answered at once instead of a 45 s wait
    assert visible.startswith(ANSWER) and "answered by claude-backup" in visible


# ---- fallback ----------------------------------------------------------------------------


async def test_529_fallback_used_after_retries_and_the_user_is_told(rig: Rig) -> None:
    rig.core.fake.script(Error(529), Error(529), Error(529), reply_text(ANSWER))
    events, visible = await rig.run()
    done = finished(events)
    assert done.model == BACKUP
    assert [r.json["model"] for r in rig.core.fake.requests] == [PRIMARY] * 3 + [BACKUP]
    note = "\n\n(answered by claude-backup: claude-test was overloaded)"
    assert visible == ANSWER + note and done.text == ANSWER + note
    # The note is shown, never stored: the model does not see it in later turns.
    assert await rig.stored_answer() == ANSWER
    assert rig.breakers.for_model(PRIMARY).state == "open"
    await assert_next_run_is_valid(rig)


async def test_every_model_failing_ends_with_one_clear_error(rig: Rig) -> None:
    rig.core.fake.responder = lambda body: Error(529)
    events, visible = await rig.run()
    failed = events[-1]
    assert isinstance(failed, RunFailed) and sum(isinstance(e, RunFailed) for e in events) == 1
    assert "claude-test overloaded, 3 attempts" in failed.message
    assert "claude-backup overloaded, 3 attempts" in failed.message
    assert "try again" in failed.message and visible == ""
    assert len(rig.core.fake.requests) == 6
    # Both breakers are open now: the next run fails at once, without a request.
    events, _ = await rig.run()
    assert isinstance(events[-1], RunFailed) and "paused after repeated failures" in events[-1].message
    assert len(rig.core.fake.requests) == 6
    # A minute later the service is back: one probe answers and the conversation is valid.
    rig.clock.now += 60
    await assert_next_run_is_valid(rig)
    assert rig.breakers.for_model(PRIMARY).state == "closed"


# ---- streams that break after text was shown -------------------------------------------


async def _broken_then_continued(rig: Rig, broken: Reply, *, restart: bool = False) -> str:
    rig.core.fake.script(broken)
    rig.core.fake.responder = continue_answer(ANSWER, restart=restart)
    events, visible = await rig.run()
    done = finished(events)
    assert visible == ANSWER, "the user's view must read as one answer, nothing repeated"
    assert done.text == ANSWER and await rig.stored_answer() == ANSWER
    retry = rig.core.fake.requests[1].json
    assert retry["messages"][-1]["role"] == "user", "no prefill: the models refuse it"
    assert shown_before_continuing(retry), "continued from the text shown"
    assert all(r.status == 200 for r in rig.core.fake.requests[1:])
    await assert_next_run_is_valid(rig)
    return visible


async def test_disconnect_mid_stream_continues_without_duplicating_text(rig: Rig) -> None:
    await _broken_then_continued(rig, Reply(Text(ANSWER[:31], chunk_size=4), Disconnect()))


async def test_overload_event_mid_stream_continues_without_duplicating_text(rig: Rig) -> None:
    await _broken_then_continued(rig, Reply(Text(ANSWER[:27], chunk_size=4), StreamError()))


async def test_truncated_stream_is_not_taken_for_a_finished_answer(rig: Rig) -> None:
    # The body ends cleanly but without message_stop: earlier this stored "The capital of
    # France is" as the whole answer.
    await _broken_then_continued(rig, Reply(Text(ANSWER[:24], chunk_size=4), Truncate()))
    assert rig.core.fake.requests[0].outcome == "truncated"


async def test_stalled_stream_is_abandoned_and_continued(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, stall_timeout_s=3.0)  # the retry must answer within it, under load too
    try:
        # Stall(None): no event at all until the client gives up.
        await _broken_then_continued(rig, Reply(Text(ANSWER[:19], chunk_size=4), Stall(None)))
        assert fake_api.requests[0].outcome == "client_disconnected"
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_trailing_space_shown_before_a_break_is_not_doubled(rig: Rig) -> None:
    # The API refuses a final assistant turn ending in whitespace: it is sent trimmed, and
    # the continuation's own leading space is not shown a second time.
    await _broken_then_continued(rig, Reply(Text("The capital of ", chunk_size=15), Disconnect()))


async def test_stall_on_a_model_refusing_prefill_shows_first_words_once(fake_api, tmp_path) -> None:
    # The reported failure: the retry was sent with the shown text as a prefill, the model
    # answered 400 "does not support assistant message prefill", and the user was told to
    # send /new. Now: one complete answer, its first words once, no refused request.
    rig = await make_rig(fake_api, tmp_path, stall_timeout_s=3.0)
    try:
        await _broken_then_continued(rig, Reply(Text(ANSWER[:19], chunk_size=4), Stall(None)))
        assert fake_api.requests[0].outcome == "client_disconnected"
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_stall_then_restarted_answer_shows_first_words_once(fake_api, tmp_path) -> None:
    # The model refuses prefill and, asked to continue, starts the whole answer again.
    rig = await make_rig(fake_api, tmp_path, stall_timeout_s=3.0)
    try:
        await _broken_then_continued(rig, Reply(Text(ANSWER[:19], chunk_size=4), Stall(None)), restart=True)
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_endpoint_ignoring_prefill_and_restarting_shows_first_words_once(fake_api, tmp_path) -> None:
    # Configured as accepting prefill (and the endpoint takes it) but restarting the answer
    # anyway, as some compatible endpoints do.
    rig = await make_rig(fake_api, tmp_path, prefill=True)
    try:
        rig.core.fake.script(Reply(Text(ANSWER[:23], chunk_size=4), Disconnect()))
        rig.core.fake.responder = continue_answer(ANSWER, restart=True)
        events, visible = await rig.run()
        assert visible == ANSWER and finished(events).text == ANSWER and await rig.stored_answer() == ANSWER
        assert rig.core.fake.requests[1].json["messages"][-1]["role"] == "assistant", "prefilled"
        await assert_next_run_is_valid(rig)
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_max_tokens_mid_answer_is_continued_once_without_repetition(rig: Rig) -> None:
    rig.core.fake.script(Reply(Text(ANSWER[:40], chunk_size=6), stop_reason="max_tokens"))
    rig.core.fake.responder = continue_answer(ANSWER)
    events, visible = await rig.run()
    done = finished(events)
    assert visible == ANSWER and done.text == ANSWER and await rig.stored_answer() == ANSWER
    assert done.stop_reason == "end_turn" and len(rig.core.fake.requests) == 2
    assert shown_before_continuing(rig.core.fake.requests[1].json) == ANSWER[:40].rstrip()
    await assert_next_run_is_valid(rig)


async def test_max_tokens_twice_is_continued_once_then_said(rig: Rig) -> None:
    rig.core.fake.responder = lambda body: Reply(Text("More and more words"), stop_reason="max_tokens")
    events, visible = await rig.run()
    done = finished(events)
    assert len(rig.core.fake.requests) == 2, "continued once, not forever"
    assert "output limit" in visible and done.stop_reason == "max_tokens"
    await assert_next_run_is_valid(rig)


async def test_break_after_text_with_every_model_down_fails_clearly(rig: Rig) -> None:
    rig.core.fake.script(Reply(Text("Partial answ", chunk_size=4), Disconnect()))
    rig.core.fake.responder = lambda body: Error(529)
    events, visible = await rig.run()
    assert isinstance(events[-1], RunFailed) and "try again" in events[-1].message
    assert ANSWER not in visible and visible.count("Partial") <= 1
    rig.clock.now += 60
    await assert_next_run_is_valid(rig)


# ---- latency fallback ------------------------------------------------------------------


async def test_slow_first_token_switches_to_the_next_model(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, slow_first_token_s=0.3)
    try:
        fake_api.script_when(lambda body: body["model"] == PRIMARY, Reply(Stall(None), Text("too late")))
        fake_api.responder = lambda body: reply_text(ANSWER)
        events, visible = await rig.run()
        assert finished(events).model == BACKUP
        assert visible == ANSWER + "\n\n(answered by claude-backup: claude-test was slow to answer)"
        assert rig.sleeps.asked == []
        # Slowness is not a failure of the model: its breaker did not count it.
        assert rig.breakers.for_model(PRIMARY).status().failures == 0
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_slow_first_token_waits_when_no_other_model_is_left(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, fallbacks=(), slow_first_token_s=0.05)
    try:
        fake_api.script(Reply(Stall(0.5), Text(ANSWER)))
        events, visible = await rig.run()
        assert finished(events).text == ANSWER and visible == ANSWER
        assert len(fake_api.requests) == 1
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_heartbeat_ok_answered_by_a_fallback_is_still_silent(rig: Rig) -> None:
    # The fallback note must not turn "nothing to report" into a message to the owner.
    from bot.heartbeat import is_silent

    rig.core.fake.script(Error(529), Error(529), Error(529), reply_text("HEARTBEAT_OK"))
    events, visible = await rig.run("heartbeat")
    assert finished(events).model == BACKUP and "answered by claude-backup" in visible
    assert is_silent(visible)


async def test_break_after_a_complete_tool_call_runs_the_tool_once(rig: Rig) -> None:
    # Text, a whole tool_use, then the connection drops before the message ends: the
    # continuation (prefilled with the text) asks for the tool again, and it runs once.
    from tests.fakes.anthropic_script import ToolUse, reply_tools

    rig.core.fake.script(Reply(Text("Let me count."), ToolUse("big", {"count": 2}), Disconnect()))

    def respond(body: dict) -> Reply:
        if shown_before_continuing(body):  # the continuation after the break
            return reply_tools(ToolUse("big", {"count": 2}))
        return reply_text("There were two lines.")

    rig.core.fake.responder = respond
    events, visible = await rig.run("count")
    assert finished(events).text == visible
    assert visible.count("Let me count.") == 1 and visible.endswith("There were two lines.")
    results = [
        b for m in rig.core.fake.requests[-1].json["messages"] if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"] if b.get("type") == "tool_result"
    ]  # fmt: skip
    assert len(results) == 1 and results[0]["content"] == "line 0\nline 1\n"
    await assert_next_run_is_valid(rig)


async def test_break_after_text_is_continued_by_the_fallback_model(rig: Rig) -> None:
    rig.core.fake.script(Reply(Text(ANSWER[:30], chunk_size=5), StreamError()), Error(529), Error(529))
    rig.core.fake.responder = continue_answer(ANSWER)
    events, visible = await rig.run()
    done = finished(events)
    assert done.model == BACKUP
    assert visible == ANSWER + "\n\n(answered by claude-backup: claude-test was overloaded)"
    assert await rig.stored_answer() == ANSWER
    assert shown_before_continuing(rig.core.fake.requests[-1].json) == ANSWER[:30].rstrip()


async def test_connection_dropped_before_any_answer_is_retried(rig: Rig) -> None:
    rig.core.fake.script(Disconnect(), reply_text(ANSWER))
    events, visible = await rig.run()
    assert finished(events).text == ANSWER and visible == ANSWER
    assert rig.sleeps.asked == [1.0] and rig.core.fake.requests[0].outcome == "dropped"
    await assert_next_run_is_valid(rig)


async def test_response_that_never_starts_counts_as_a_stall(fake_api, tmp_path) -> None:
    # No headers at all: the SDK's own timeout is 120 s; the stall limit ends it first.
    rig = await make_rig(fake_api, tmp_path, stall_timeout_s=3.0)  # the retry must answer within it, under load too
    try:
        fake_api.script(Stall(None), reply_text(ANSWER))
        events, visible = await rig.run()
        assert finished(events).text == ANSWER and visible == ANSWER
        assert [r.json["model"] for r in fake_api.requests] == [PRIMARY, PRIMARY]
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()
