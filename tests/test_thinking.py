"""Extended thinking end to end: the real anthropic SDK against the strict fake Messages API
(which signs every thinking block it emits and refuses an altered or missing one, as the
service does), the whole app, and the real Telegram adapter for what the chat shows.

Invariant: with thinking on, every thinking block goes back to the service exactly as it
came, at the head of its turn, for as long as the conversation is sent; the chat shows that
the model thinks but never its reasoning; with thinking off no thinking parameter is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from adapters.console import ConsoleAdapter, ConsoleReply
from agent_core.events import TextDelta, ThinkingDelta, TurnEnded
from agent_core.thinking import Thinking, without_thinking
from bot.settings import Settings
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, ToolUse
from tests.fakes.anthropic_thinking import Thinking as ThinkingPart, sign
from tests.fakes.recording_adapter import private
from tests.fakes.telegram_api import FakeTelegram
from tests.discord_harness import OWNER as DISCORD_OWNER, dc, running as running_discord  # noqa: F401
from tests.fakes.discord_api import FakeDiscord
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)

REASONING = "SECRET-REASONING: the user wants the file; read it, then check the log."


def _messages_requests(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r.json for r in fake.requests if r.path == "/v1/messages"]


async def test_thinking_off_sends_no_thinking_parameter(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    fake_api.script(Reply(Text("plain answer")))
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "hello"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
    (body,) = _messages_requests(fake_api)
    assert "thinking" not in body and "temperature" not in body
    assert body["max_tokens"] == 4096


async def test_two_tool_rounds_with_thinking_send_every_signature_back_unchanged(
    tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        Reply(ThinkingPart("First I read AGENTS.md."), ToolUse("read_file", {"path": "AGENTS.md"})),
        Reply(ThinkingPart("Now SOUL.md as well."), ToolUse("read_file", {"path": "SOUL.md"})),
        Reply(ThinkingPart("Both read; answer."), Text("Both files are there.")),
        Reply(Text("Still here.")),  # the next run: the whole history, thinking included, goes back
    )
    async with running_app(tmp_path, fake_api, agent={"thinking": "adaptive"}) as (app, adapter):
        await adapter.say(private(OWNER_ID, "read both files"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=20)
        await adapter.say(private(OWNER_ID, "and now?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2, timeout=20)
        first, second = adapter.closed_replies()
    requests = [r for r in fake_api.requests if r.path == "/v1/messages"]
    # Every request was accepted: the fake checks each signature and the tool-loop rule.
    assert [r.status for r in requests] == [200, 200, 200, 200], [r.error for r in requests]
    assert "Both files are there." in first.text and "Still here." in second.text
    bodies = [r.json for r in requests]
    for body in bodies:
        assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
        assert "temperature" not in body
    # The turns went back exactly as served, thinking at the head of each.
    served = [
        {"type": "thinking", "thinking": t, "signature": sign(t)}
        for t in ["First I read AGENTS.md.", "Now SOUL.md as well.", "Both read; answer."]
    ]
    assistant_turns = [m["content"] for m in bodies[3]["messages"] if m["role"] == "assistant"]
    assert [turn[0] for turn in assistant_turns] == served
    assert all(REASONING not in r.text for r in adapter.closed_replies())


async def test_redacted_thinking_in_a_tool_loop_goes_back_unchanged(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    from tests.fakes.anthropic_thinking import RedactedThinking

    fake_api.script(Reply(RedactedThinking(), ToolUse("read_file", {"path": "AGENTS.md"})), Reply(Text("Read it.")))
    async with running_app(tmp_path, fake_api, agent={"thinking": "4096"}) as (app, adapter):
        await adapter.say(private(OWNER_ID, "read the file"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=20)
        (reply,) = adapter.closed_replies()
    first, second = (r for r in fake_api.requests if r.path == "/v1/messages")
    assert second.status == 200, second.error
    assert reply.text == "Read it."
    turn = next(m["content"] for m in second.json["messages"] if m["role"] == "assistant")
    assert turn[0]["type"] == "redacted_thinking" and turn[0]["data"]


async def test_thinking_budget_is_sent_with_room_for_the_answer(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    fake_api.script(Reply(Text("ok")))
    async with running_app(tmp_path, fake_api, agent={"thinking": "2048"}) as (app, adapter):
        await adapter.say(private(OWNER_ID, "think a little"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
    (body,) = _messages_requests(fake_api)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048, "display": "summarized"}
    assert body["max_tokens"] == 4096 + 2048


@pytest.mark.parametrize("value", ["500", "sometimes", "-1"])
def test_invalid_thinking_setting_is_a_clear_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="agent.thinking"):
        Settings(home=tmp_path, agent={"thinking": value})


async def test_chat_shows_thinking_then_the_answer_without_the_reasoning(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    # The model thinks for a while (the stall) before it answers: long enough for the chat
    # to show the status, which the answer then replaces in the same message.
    fake_api.script(Reply(ThinkingPart(REASONING, chunk_size=8), Stall(4.0), Text("The answer is 42.")))
    async with running(tmp_path, tg, fake_api, agent={"thinking": "adaptive"}) as h:
        tg.send_private(OWNER, "what is the answer?")
        thinking = await h.bot_text(OWNER, lambda t: "💭 thinking…" in t, timeout=15)
        final = await h.bot_text(OWNER, lambda t: t == "The answer is 42.", timeout=15)
        await h.app.conversations.lanes.drain()
    assert final.message_id == thinking.message_id  # replaced in place, not a second message
    assert final.text == "The answer is 42."
    shown = [str(c.params.get("text", "")) for c in tg.calls if c.params.get("chat_id") == OWNER]
    assert not any("SECRET-REASONING" in text for text in shown)


def test_console_prints_a_dim_thinking_line_but_not_the_reasoning() -> None:
    import asyncio
    import io

    out = io.StringIO()
    reply = ConsoleReply(ConsoleAdapter(stdin=io.StringIO(""), stdout=out))

    async def feed() -> None:
        for event in (ThinkingDelta(""), ThinkingDelta(REASONING), TextDelta("Answer."), TurnEnded(1)):
            await reply.handle(event)

    asyncio.run(feed())
    text = out.getvalue()
    assert "\x1b[2mthinking…\x1b[0m" in text and text.count("thinking…") == 1
    assert "SECRET-REASONING" not in text and "Answer." in text


# -- the fake is as strict as the service -----------------------------------------------------


def _client(fake: FakeAnthropic) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.base_url, api_key="test-key", max_retries=0)


_TOOLS = [{"name": "look", "description": "look", "input_schema": {"type": "object"}}]


def _tool_loop(turn: list[dict[str, Any]], tool_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": turn},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "seen"}]},
    ]


def _thinking_turn(fake: FakeAnthropic) -> list[dict[str, Any]]:
    fake.script(Reply(ThinkingPart("I should look."), ToolUse("look", {})))
    answer = _client(fake).messages.create(
        model="claude-test", max_tokens=20_000, tools=_TOOLS, messages=[{"role": "user", "content": "go"}],
        thinking={"type": "enabled", "budget_tokens": 1024, "display": "summarized"},
    )  # fmt: skip
    return [b.model_dump(exclude_none=True) for b in answer.content]


def test_fake_refuses_an_altered_thinking_signature(fake_api: FakeAnthropic) -> None:
    turn = _thinking_turn(fake_api)
    assert turn[0]["type"] == "thinking" and turn[0]["signature"]
    altered = [{**turn[0], "thinking": turn[0]["thinking"] + " (edited)"}, *turn[1:]]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        _client(fake_api).messages.create(
            model="claude-test", max_tokens=20_000, tools=_TOOLS, messages=_tool_loop(altered, turn[1]["id"]),
            thinking={"type": "adaptive"},
        )  # fmt: skip


def test_fake_refuses_a_tool_loop_turn_whose_thinking_was_dropped(fake_api: FakeAnthropic) -> None:
    turn = _thinking_turn(fake_api)
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        _client(fake_api).messages.create(
            model="claude-test", max_tokens=20_000, tools=_TOOLS, messages=_tool_loop(turn[1:], turn[1]["id"]),
            thinking={"type": "adaptive"},
        )  # fmt: skip


def test_fake_refuses_temperature_with_thinking(fake_api: FakeAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="`temperature` may only be set to 1"):
        _client(fake_api).messages.create(
            model="claude-test", max_tokens=4096, messages=[{"role": "user", "content": "hi"}],
            thinking={"type": "adaptive"}, extra_body={"temperature": 0.2},  # SDK 2.14 has no `temperature`
        )  # fmt: skip


def test_without_thinking_drops_whole_blocks_and_keeps_the_rest_identical() -> None:
    plain = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    thought = {"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "s"},
                                                {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}  # fmt: skip
    user = {"role": "user", "content": [{"type": "text", "text": "q"}]}
    out = without_thinking([user, plain, thought])
    assert out[0] is user and out[1] is plain  # untouched messages: the cached prefix stays
    assert out[2]["content"] == [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]
    assert Thinking.parse("off").param() is None


async def test_compaction_with_thinking_keeps_every_turn_it_sends_valid(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    """Compaction cuts only between turns: the kept turns go back with their thinking whole,
    the summary and flush requests (no thinking parameter) carry none, and the service accepts
    every request."""
    from agent_core.compaction import FLUSH_PROMPT, SUMMARY_HEADER, CompactionConfig
    from tests.fakes.anthropic_script import user_texts

    def answer(body: dict[str, Any]) -> Reply:
        if any("You compress" in b.get("text", "") for b in body.get("system") or []):
            return Reply(Text("## Active task\n- reading files"))
        if any(FLUSH_PROMPT in t for t in user_texts(body)):
            return Reply(Text("saved"))
        last = body["messages"][-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            return Reply(Text("done reading"))
        return Reply(ToolUse("read_file", {"path": "AGENTS.md"}))

    fake_api.responder = answer
    async with running_app(tmp_path, fake_api, agent={"thinking": "adaptive"}) as (app, adapter):
        assert app.agent.compactor is not None
        app.agent.compactor.config = CompactionConfig(keep_recent_tokens=0)  # keep only the newest turn
        for n, text in enumerate(["read one", "read two", "read three"]):
            if n == 2:
                app.agent.compactor.force("main")
            await adapter.say(private(OWNER_ID, text))
            await adapter.wait_for(lambda n=n: len(adapter.closed_replies()) == n + 1, timeout=20)
    requests = [r for r in fake_api.requests if r.path == "/v1/messages"]
    assert all(r.status == 200 for r in requests), [r.error for r in requests if r.status != 200]
    last = requests[-1].json
    assert last["messages"][0]["content"][0]["text"].startswith(SUMMARY_HEADER)
    assistant_turns = [m["content"] for m in last["messages"] if m["role"] == "assistant"]
    assert assistant_turns and all(turn[0]["type"] == "thinking" for turn in assistant_turns)
    side = [r.json for r in requests if "thinking" not in r.json]
    assert len(side) == 2  # the flush and the summary
    assert not any(b.get("type") == "thinking" for body in side for m in body["messages"] for b in m["content"])


async def test_discord_shows_thinking_then_the_answer_without_the_reasoning(
    tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(ThinkingPart(REASONING, chunk_size=8), Stall(4.0), Text("The answer is 42.")))
    async with running_discord(tmp_path, dc, fake_api, agent={"thinking": "adaptive"}) as h:
        dm = dc.dm_channel(DISCORD_OWNER)
        dc.say(dm, DISCORD_OWNER, "what is the answer?")
        thinking = await h.bot_text(dm, lambda t: "💭 thinking…" in t, timeout=15)
        final = await h.bot_text(dm, lambda t: t == "The answer is 42.", timeout=15)
        await h.app.conversations.lanes.drain()
        shown = [str((c.json or {}).get("content", "")) for c in h.changes_in(dm)]
    assert final.id == thinking.id and final.content == "The answer is 42."
    assert not any("SECRET-REASONING" in text for text in shown)
