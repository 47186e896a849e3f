"""Thinking (ROOST_AGENT__THINKING): blocks kept byte for byte with their signatures and sent
back unchanged through a tool loop (the strict fake refuses an altered or dropped one), the
chat shows "💭 thinking…" while the model thinks and the answer never contains the reasoning;
off, or on a model that does not think, no thinking parameter is sent."""

from __future__ import annotations

import dataclasses

from agent_core.events import TextDelta, ThinkingChanged
from agent_core.models import ModelFacts, ModelTable, thinking_param
from tests.failover_rig import PRIMARY, Rig, assert_next_run_is_valid, finished, make_rig
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, Thinking, ToolUse, reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)

REASONING = ("Count the lines first.", "Two lines; check once more.", "Both checks agree.")
ANSWER = "There were two lines."


async def thinking_rig(fake_api: FakeAnthropic, tmp_path, mode: str = "adaptive", *, thinks: bool = True) -> Rig:
    rig = await make_rig(fake_api, tmp_path, fallbacks=(), facts=ModelTable({PRIMARY: ModelFacts(thinking=thinks)}))
    rig.core.loop.config = dataclasses.replace(rig.core.loop.config, thinking=thinking_param(mode))
    return rig


async def close(rig: Rig) -> None:
    await rig.llm.aclose()
    await rig.core.llm.aclose()
    await rig.core.storage.aclose()


async def test_two_tool_rounds_with_thinking_keep_signatures_valid_and_the_answer_clean(fake_api, tmp_path) -> None:
    rig = await thinking_rig(fake_api, tmp_path)
    try:
        fake_api.script(
            Reply(Thinking(REASONING[0], chunk_size=6), ToolUse("big", {"count": 2})),
            Reply(Thinking(REASONING[1], chunk_size=6), ToolUse("big", {"count": 2})),
            Reply(Thinking(REASONING[2]), Text(ANSWER)),
        )
        events, visible = await rig.run("count")
        done = finished(events)
        # The strict fake checked every signature: each request was accepted.
        assert [r.status for r in fake_api.requests] == [200, 200, 200]
        assert all(r.json["thinking"] == {"type": "adaptive", "display": "summarized"} for r in fake_api.requests)
        # The answer is the answer: no reasoning in what was shown or what the run reports.
        assert visible == ANSWER and done.text == ANSWER
        assert not any(r in visible for r in REASONING)
        # The user was shown that it thinks, before any text.
        shown = [e for e in events if isinstance(e, ThinkingChanged | TextDelta)]
        assert isinstance(shown[0], ThinkingChanged) and shown[0].active
        # Sent back exactly as served, signature and all.
        served = [p for r in fake_api.requests for p in r.served.parts if isinstance(p, Thinking)]
        last = fake_api.requests[-1].json["messages"]
        sent = [b for m in last if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"]
        assert [(b["thinking"], b["signature"]) for b in sent] == [(t.text, t.signature) for t in served[:2]]
        stored = await rig.core.storage.load_transcript("main")
        kept = [b for m in stored if m["role"] == "assistant" for b in m["content"] if b["type"] == "thinking"]
        assert [(b["thinking"], b["signature"]) for b in kept] == [(t.text, t.signature) for t in served]
        # The next run sends the whole stored conversation, thinking included: still valid.
        await assert_next_run_is_valid(rig)
    finally:
        await close(rig)


async def test_thinking_off_sends_no_thinking_parameter(fake_api, tmp_path) -> None:
    rig = await thinking_rig(fake_api, tmp_path, "off")
    try:
        fake_api.script(reply_text(ANSWER))
        await rig.run()
        assert "thinking" not in fake_api.requests[0].json
    finally:
        await close(rig)


async def test_thinking_is_not_sent_to_a_model_that_does_not_think(fake_api, tmp_path) -> None:
    rig = await thinking_rig(fake_api, tmp_path, "4096", thinks=False)
    try:
        fake_api.script(reply_text(ANSWER))
        await rig.run()
        assert "thinking" not in fake_api.requests[0].json and fake_api.requests[0].json["max_tokens"] == 4096
    finally:
        await close(rig)


async def test_a_thinking_budget_rides_on_top_of_the_answers_max_tokens(fake_api, tmp_path) -> None:
    rig = await thinking_rig(fake_api, tmp_path, "8000")
    try:
        fake_api.script(Reply(Thinking("hmm"), Text(ANSWER)))
        _, visible = await rig.run()
        sent = fake_api.requests[0].json
        assert sent["thinking"]["budget_tokens"] == 8000 and sent["max_tokens"] == 8000 + 4096
        assert visible == ANSWER
    finally:
        await close(rig)


async def test_telegram_shows_thinking_status_then_only_the_answer(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    agent = {"thinking": "adaptive", "models": {"claude-test": {"thinking": True}}}
    # Thinking streams for a while (paced deltas) so the status is on screen before the answer.
    fake_api.script(Reply(Thinking("Let me work this out carefully step by step. " * 6, chunk_size=10), Stall(1.5), Text(ANSWER)))
    async with running(tmp_path, tg, fake_api, agent=agent) as h:
        tg.send_private(OWNER, "how many lines?")
        await h.says(OWNER, ANSWER, timeout=20)
        texts = [c.params.get("text", "") for c in tg.calls if c.method in ("sendMessage", "editMessageText")
                 and c.params.get("chat_id") == OWNER]  # fmt: skip
    assert any("💭 thinking…" in t for t in texts), texts
    assert not any("step by step" in t for t in texts), "the reasoning is never shown"
    assert fake_api.requests[0].json["thinking"]["display"] == "summarized"


async def test_a_model_refusing_thinking_is_learned_and_answers_without_it(fake_api, tmp_path) -> None:
    # The table says it thinks; the service says otherwise: retried at once without the
    # parameter (not a /new, not a wait), and later runs do not send it again.
    from tests.fakes.anthropic_models import FakeModel

    rig = await thinking_rig(fake_api, tmp_path)
    fake_api.models[PRIMARY] = FakeModel(PRIMARY, PRIMARY, thinking=False)
    try:
        fake_api.responder = lambda body: reply_text(ANSWER)
        events, visible = await rig.run()
        assert finished(events).text == ANSWER and visible == ANSWER
        assert [r.status for r in fake_api.requests] == [400, 200]
        assert "thinking" not in fake_api.requests[1].json
        await rig.run("again")
        assert "thinking" not in fake_api.requests[-1].json and fake_api.requests[-1].status == 200
    finally:
        await close(rig)


async def test_discord_shows_thinking_status_then_only_the_answer(tmp_path, fake_api: FakeAnthropic) -> None:
    from tests.discord_harness import OWNER as DC_OWNER
    from tests.discord_harness import TOKEN as DC_TOKEN
    from tests.discord_harness import running as dc_running
    from tests.discord_harness import world
    from tests.fakes.discord_api import FakeDiscord

    agent = {"thinking": "adaptive", "models": {"claude-test": {"thinking": True}}}
    fake_api.script(Reply(Thinking("Let me work this out carefully step by step. " * 6, chunk_size=10), Stall(1.5), Text(ANSWER)))
    with FakeDiscord(token=DC_TOKEN) as raw:
        dc = world(raw)
        async with dc_running(tmp_path, dc, fake_api, agent=agent) as h:
            dm = dc.dm_channel(DC_OWNER)
            dc.say(dm, DC_OWNER, "how many lines?")
            await dc.await_for(lambda: [m.content for m in dc.bot_messages(dm)] == [ANSWER], 20)
            contents = [c.json.get("content", "") for c in h.changes_in(dm)]
    assert any("💭 thinking…" in t for t in contents), contents
    assert not any("step by step" in t for t in contents), "the reasoning is never shown"
