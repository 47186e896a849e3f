"""ask_user over the wire: the run pauses with the question in the chat; the addressee's next
message or button resumes the same run with the answer as the tool result; a restart while
waiting keeps the question and the reply still reaches the task; anyone else's press is
refused and changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from agent_core.prompt import ADDRESSED_SOURCE, frame_untrusted
from tests.fakes.anthropic_script import ToolUse, context_tail, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import StoredMessage
from tests.discord_harness import MEMBER as DC_MEMBER
from tests.discord_harness import OWNER as DC_OWNER
from tests.discord_harness import dc  # noqa: F401  (fixture)
from tests.discord_harness import running as running_discord
from tests.fakes.discord_api import FakeDiscord
from tests.telegram_harness import GROUP, MEMBER, OWNER, STRANGER, Harness, running, tg  # noqa: F401  (fixture)

QUESTION = "Which server should I restart?"
MALLORY = 78


def addressed_answer(text: str) -> str:
    return frame_untrusted(text, ADDRESSED_SOURCE)


def buttons(message: StoredMessage) -> dict[str, str]:
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def press(h: Harness, card: StoredMessage, label: str, user: int) -> dict[str, Any]:
    query = h.tg.press_button(OWNER, card.message_id, user, buttons(card)[label], first_name="X")
    state = await h.tg.await_for(lambda: h.tg.callback_query(query).answered and h.tg.callback_query(query))
    return state.answer or {}


def answer_in(request_json: dict[str, Any]) -> str:
    """The text of the tool results in the request's last message."""
    last = request_json["messages"][-1]
    return " ".join(str(b.get("content")) for b in last["content"] if b.get("type") == "tool_result")


async def runs_of(h: Harness) -> int:
    async with h.app.storage.engine.connect() as conn:
        from sqlalchemy import text

        return int((await conn.execute(text("SELECT count(*) FROM runs WHERE session_key = 'main'"))).scalar_one())


async def test_reply_resumes_the_same_run_with_the_answer_as_the_tool_result(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})), reply_text("Restarting web-2 now."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart the server that is down")
        await h.says(OWNER, f"❓ {QUESTION}")
        assert len(fake_api.requests) == 1  # paused: no further model call while waiting
        tg.send_private(OWNER, "web-2")
        await h.bot_text(OWNER, lambda t: t.startswith("Restarting web-2 now."))
        await h.app.conversations.lanes.drain()
        requests = fake_api.requests
        assert len(requests) == 2
        assert "answered: web-2" in answer_in(requests[1].json)
        assert await runs_of(h) == 1, "the answer started a new run instead of resuming"
        assert await h.app.storage.pending_question("main") is None


async def test_button_answers_and_only_the_addressee_may_press_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(ToolUse("ask_user", {"question": QUESTION, "options": ["web-1", "web-2"]})),
        reply_text("Restarting web-1 now."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart the server that is down")
        card = await h.says(OWNER, f"❓ {QUESTION}")
        assert set(buttons(card)) == {"web-1", "web-2"}
        assert all(len(d.encode()) <= 64 for d in buttons(card).values())

        refused = await press(h, card, "web-2", user=STRANGER)
        assert refused == {"text": "This question isn't for you.", "show_alert": True}
        assert len(fake_api.requests) == 1 and await h.app.storage.pending_question("main") is not None

        answered = await press(h, card, "web-1", user=OWNER)
        assert answered.get("text") == "✓ web-1"
        await h.bot_text(OWNER, lambda t: t.startswith("Restarting web-1 now."))
        await h.app.conversations.lanes.drain()
        assert "answered: web-1" in answer_in(fake_api.requests[1].json)
        again = await press(h, card, "web-1", user=OWNER) if buttons(tg.message(OWNER, card.message_id)) else None
        assert again in (None, {"text": "This question was already answered or is closed.", "show_alert": True})


async def test_a_restart_while_waiting_keeps_the_question_and_the_reply_still_reaches_the_task(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart the server that is down")
        await h.says(OWNER, f"❓ {QUESTION}")
    fake_api.script(reply_text("Restarting web-2 now."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        pending = await h.app.storage.pending_question("main")
        assert pending is not None and pending.text == QUESTION
        tg.send_private(OWNER, "web-2")
        await h.bot_text(OWNER, lambda t: t.startswith("Restarting web-2 now."))
        await h.app.conversations.lanes.drain()
        resumed = fake_api.requests[-1].json
        last_user = resumed["messages"][-1]
        shown = " ".join(str(b.get("text") or b.get("content")) for b in last_user["content"])
        assert QUESTION in shown and "web-2" in shown, shown
        assert await h.app.storage.pending_question("main") is None



async def test_discord_option_button_answers_and_a_non_addressee_is_told_ephemerally(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The same question on Discord: buttons through the generic button path, no Discord code
    in the core."""
    fake_api.script(
        reply_tools(ToolUse("ask_user", {"question": QUESTION, "options": ["web-1", "web-2"]})),
        reply_text("Restarting web-2 now."),
    )
    async with running_discord(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(DC_OWNER)
        dc.say(dm, DC_OWNER, "restart the server that is down")
        card = await h.bot_text(dm, lambda t: t == f"❓ {QUESTION}")
        assert set(card.custom_ids) == {"web-1", "web-2"}

        refused = dc.press(card.id, DC_MEMBER, label="web-2")
        done = await dc.await_for(lambda: (i := dc.interaction(refused)).followups and i)
        assert [f["content"] for f in done.followups] == ["This question isn't for you."]
        assert len(fake_api.requests) == 1

        dc.press(card.id, DC_OWNER, label="web-2")
        await h.bot_text(dm, lambda t: t.startswith("Restarting web-2 now."))
        assert "answered: web-2" in answer_in(fake_api.requests[1].json)


async def test_stop_while_waiting_closes_the_question_and_the_next_message_is_a_new_request(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})), reply_text("Hello again."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart the server that is down")
        await h.says(OWNER, f"❓ {QUESTION}")
        tg.send_private(OWNER, "/stop")
        await h.says(OWNER, "Stopped.")
        await h.app.conversations.lanes.drain()
        assert await h.app.storage.pending_question("main") is None
        tg.send_private(OWNER, "hi")
        await h.bot_text(OWNER, lambda t: t.startswith("Hello again."))
        assert await runs_of(h) == 2  # a new run, not an answer to the closed question


async def test_new_after_a_restart_drops_the_old_question_goal_and_plan(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    steps = [{"title": "pick a server", "done_when": "the user named one"}]
    fake_api.script(
        reply_tools(ToolUse("plan", {"action": "create", "steps": steps, "goal": "restart the broken server"})),
        reply_tools(ToolUse("ask_user", {"question": QUESTION})),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart the server that is down")
        await h.says(OWNER, f"❓ {QUESTION}")
    fake_api.script(reply_text("Fresh start."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "/new")
        await h.bot_text(OWNER, lambda t: t.startswith("Started a fresh session"))
        tg.send_private(OWNER, "web-2")  # no longer an answer to the old question
        await h.bot_text(OWNER, lambda t: t.startswith("Fresh start."))
        fresh = fake_api.requests[-1].json
        assert "restart the broken server" not in json.dumps(fresh["system"]) + context_tail(fresh)
        assert len(fresh["messages"]) == 1
        assert await h.app.storage.goal_lock("main") is None and await h.app.storage.active_plan("main") is None


@pytest.mark.parametrize("mode", ["collect", "followup", "steer", "interrupt"])
async def test_another_group_members_text_never_answers_someone_elses_question(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic, mode: str
) -> None:
    """Bob asked, the question is Bob's: Mallory's reply (a reply to the question, and a
    mention) is not the answer — the run still waits, and Mallory's words never reach it as
    Bob's; Bob's reply then answers it."""
    group_key = f"group:telegram:{GROUP}"
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})), reply_text("Restarting web-2 now."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        h.app.conversations.lanes.set_mode(group_key, mode)
        tg.send_group(GROUP, MEMBER, "restart the server that is down", mention=True, first_name="Bob")
        card = await h.says(GROUP, f"❓ {QUESTION}")
        tg.send_group(GROUP, MALLORY, "web-1", reply_to_bot_message_id=card.message_id, first_name="Mallory")
        await h.bot_text(GROUP, lambda t: t.startswith("⏳"))  # queued behind Bob's run, told so
        pending = await h.app.storage.pending_question(group_key)
        assert pending is not None and pending.addressee == f"telegram:{MEMBER}"
        assert len(fake_api.requests) == 1, "another member's text answered the question"

        tg.send_group(GROUP, MEMBER, "web-2", reply_to_bot_message_id=card.message_id, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("Restarting web-2 now."))
        answered = answer_in(fake_api.requests[1].json)  # a member's words: framed as theirs
        assert answered == f"The user (telegram:{MEMBER}) answered: {addressed_answer('web-2')}"
        assert await h.app.storage.pending_question(group_key) is None
