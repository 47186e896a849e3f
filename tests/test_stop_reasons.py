"""Every stop reason and every kind of 400 ends in something a user can act on, through the
real loop, FailoverLLM, the anthropic SDK and the strict fake Messages API: a refusal is said
plainly (or a configured fallback answers), a paused turn is continued, a turn that ran out of
context window is compacted and answered, an unknown reason gets a clear line, and a model's
refusal of a feature is named — never "send /new" for what starting over cannot cure."""

from __future__ import annotations

import json
from typing import Any

from agent_core.compaction import FLUSH_PROMPT, SUMMARY_HEADER, SUMMARY_SYSTEM, CompactionConfig, Compactor
from agent_core.events import RunFailed
from tests.failover_rig import ANSWER, BACKUP, PRIMARY, Rig, assert_next_run_is_valid, finished, make_rig
from tests.failover_rig import rig  # noqa: F401  (fixture)
from tests.fakes.anthropic_models import FakeModel
from tests.fakes.anthropic_script import Error, Reply, Text, reply_text


async def test_refusal_is_said_plainly_when_no_fallback_is_configured(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, fallbacks=())
    try:
        fake_api.script(Reply(stop_reason="refusal"))
        events, visible = await rig.run("something it declines")
        done = finished(events)
        assert done.stop_reason == "refusal" and "declined to answer" in visible
        assert "/new" not in visible
        await assert_next_run_is_valid(rig)
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_refusal_goes_to_the_configured_fallback(rig: Rig) -> None:
    rig.core.fake.script_when(lambda body: body["model"] == PRIMARY, Reply(stop_reason="refusal"))
    rig.core.fake.responder = lambda body: reply_text(ANSWER)
    events, visible = await rig.run()
    done = finished(events)
    assert done.model == BACKUP and visible == ANSWER + "\n\n(answered by claude-backup: claude-test declined to answer)"
    assert await rig.stored_answer() == ANSWER
    # A refusal says nothing about the model's health.
    assert rig.breakers.for_model(PRIMARY).status().failures == 0


async def test_pause_turn_is_continued_to_the_answer(rig: Rig) -> None:
    rig.core.fake.script(Reply(Text("Searching the web first."), stop_reason="pause_turn"), reply_text(" Found: Paris."))
    events, visible = await rig.run()
    done = finished(events)
    assert done.stop_reason == "end_turn" and visible == "Searching the web first. Found: Paris."
    # Continued without a prefill (the fake would have refused one with a 400).
    assert [r.status for r in rig.core.fake.requests] == [200, 200]
    await assert_next_run_is_valid(rig)


async def test_unknown_stop_reason_gets_a_clear_line_and_no_wedge(rig: Rig) -> None:
    rig.core.fake.script(Reply(Text("Half an answer"), stop_reason="brand_new_reason"))
    events, visible = await rig.run()
    assert finished(events).stop_reason == "brand_new_reason"
    assert visible.startswith("Half an answer") and "'brand_new_reason'" in visible
    await assert_next_run_is_valid(rig)


async def test_unsupported_parameter_400_names_it_and_does_not_trim_or_say_new(fake_api, tmp_path) -> None:
    rig = await make_rig(fake_api, tmp_path, fallbacks=())
    try:
        fake_api.script(Error(400, message="temperature: This parameter is not supported by claude-test."))
        events, _ = await rig.run()
        failed = events[-1]
        assert isinstance(failed, RunFailed) and failed.kind == "unsupported"
        assert "temperature" in failed.message and "/new" not in failed.message
        assert len(fake_api.requests) == 1, "not retried with a trimmed conversation: it was not its fault"
        await assert_next_run_is_valid(rig)
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_unknown_model_names_it_and_the_fallback_answers(rig: Rig) -> None:
    rig.core.fake.strict_models = True
    del rig.core.fake.models[PRIMARY]
    rig.core.fake.responder = lambda body: reply_text(ANSWER)
    events, visible = await rig.run()
    assert finished(events).model == BACKUP
    assert "answered by claude-backup: claude-test cannot be used" in visible and "does not know the model" in visible
    assert [r.json["model"] for r in rig.core.fake.requests] == [PRIMARY, BACKUP], "no retries of a missing model"


async def test_every_model_unsupported_fails_naming_each_without_new_or_retry_later(rig: Rig) -> None:
    rig.core.fake.responder = lambda body: Error(400, message="thinking: this model does not support thinking.")
    events, _ = await rig.run()
    failed = events[-1]
    assert isinstance(failed, RunFailed) and failed.kind == "unsupported"
    assert "claude-test cannot be used" in failed.message and "claude-backup cannot be used" in failed.message
    assert "/new" not in failed.message and "try again in a minute" not in failed.message.lower()


async def test_max_tokens_above_the_models_limit_is_clamped_not_refused(rig: Rig) -> None:
    # The table does not know the limit; the service's 400 teaches it and the same model answers.
    rig.core.fake.models[PRIMARY] = FakeModel(PRIMARY, PRIMARY, max_output_tokens=1000)
    rig.core.fake.responder = lambda body: reply_text(ANSWER)
    events, visible = await rig.run()
    assert finished(events).model == PRIMARY and visible == ANSWER
    assert [r.json["max_tokens"] for r in rig.core.fake.requests] == [4096, 1000]


async def test_context_window_exceeded_is_compacted_and_answered(rig: Rig) -> None:
    for i in range(12):
        await rig.core.storage.append_message("main", None, "user", [{"type": "text", "text": f"Turn {i}. " + "x " * 400}])
        await rig.core.storage.append_message("main", None, "assistant", [{"type": "text", "text": f"Noted {i}."}])
    rig.core.loop.compactor = Compactor(
        rig.core.loop._llm, rig.core.storage,
        CompactionConfig(context_window_tokens=10**9, keep_recent_tokens=500, timeout_s=30),
    )  # fmt: skip

    def respond(body: dict[str, Any]) -> Reply:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        if FLUSH_PROMPT in sent:
            return reply_text("nothing to save")
        if any(SUMMARY_SYSTEM in b.get("text", "") for b in body.get("system") or []):
            return reply_text("## Active task\n- answering")
        if SUMMARY_HEADER not in sent:
            return Reply(Text("Let me"), stop_reason="model_context_window_exceeded")
        return reply_text(ANSWER)

    rig.core.fake.responder = respond
    events, visible = await rig.run("and the capital?")
    done = finished(events)
    assert visible.endswith(ANSWER) and "compacted it" in visible
    assert await rig.stored_answer() == ANSWER
    assert SUMMARY_HEADER in json.dumps(rig.core.fake.requests[-1].json["messages"], ensure_ascii=False)
    assert len(await rig.core.storage.load_transcript("main")) == 24 + 2, "nothing lost from storage"
    assert done.stop_reason == "end_turn"
