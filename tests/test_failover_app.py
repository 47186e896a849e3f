"""Failover settings wired through the real app (bot.app.build): ROOST_AGENT__STALL_TIMEOUT_S
and ROOST_AGENT__SLOW_FIRST_TOKEN_S reach the model client, and what the user gets in chat."""

from __future__ import annotations

from tests.app_harness import OWNER_ID, running_app
from tests.failover_rig import ANSWER, BACKUP, PRIMARY, continue_answer, shown_before_continuing
from tests.fakes.anthropic_script import Reply, Stall, Text, reply_text
from tests.fakes.recording_adapter import private


async def test_stalled_stream_in_chat_is_continued_without_repeating_text(tmp_path, fake_api) -> None:
    # The limit is a gap between events: 0.3 s failed once in CI when the continuation's own
    # first event came later than that on a loaded 2-core host (ran out of retries).
    agent = {"stall_timeout_s": 2.0, "max_retries": 2}
    async with running_app(tmp_path, fake_api, agent=agent) as (app, adapter):
        fake_api.script(Reply(Text(ANSWER[:25], chunk_size=5), Stall(None)))
        fake_api.responder = continue_answer(ANSWER)
        await adapter.say(private(OWNER_ID, "capital of France?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=20)
        assert adapter.closed_replies()[0].outcome.text == ANSWER
        assert fake_api.requests[0].outcome == "client_disconnected"
        # Continued without a prefill (Roost's table: unknown models refuse it).
        assert shown_before_continuing(fake_api.requests[1].json) == ANSWER[:25].rstrip()


async def test_slow_first_token_in_chat_switches_model_and_says_so(tmp_path, fake_api) -> None:
    agent = {"fallback_models": [BACKUP], "slow_first_token_s": 0.3}
    async with running_app(tmp_path, fake_api, agent=agent) as (app, adapter):
        fake_api.script_when(lambda body: body["model"] == PRIMARY, Reply(Stall(None), Text("late")))
        fake_api.responder = lambda body: reply_text("quick answer")
        await adapter.say(private(OWNER_ID, "hello"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=20)
        text = adapter.closed_replies()[0].outcome.text
        assert text == "quick answer\n\n(answered by claude-backup: claude-test was slow to answer)"
