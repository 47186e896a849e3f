"""Discord pings nobody Roost did not mean to: every request that can carry content — a
send, an edit, an interaction response or follow-up — carries `allowed_mentions` that
parses nothing. The fake refuses (and records) any request without it, so each button
press below fails if its edit omits the field; the `dc` fixture also checks every other
Discord test for it."""

from __future__ import annotations

import sqlite3


from tests.discord_harness import OWNER, Harness, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, ToolUse, reply_text, reply_tools
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_rest import message_body, suppresses_pings
from tests.fakes.discord_state import StoredMessage

QUESTION = "Which server should I restart?"


def requests_of_press(dc: FakeDiscord, interaction_id: str) -> list[dict]:
    """What Roost sent in answer to one press (its callback, edits and follow-ups)."""
    token = dc.interaction(interaction_id).token
    return [
        body for c in dc.calls
        if (interaction_id in c.path or token in c.path)
        and (body := message_body(c.method, c.path, c.json)) is not None
    ]


async def pressed_and_edited(h: Harness, card: StoredMessage, label: str, result: str) -> None:
    """Press `label`: the card must end showing `result` without buttons, and every request
    of the press that could carry content must suppress pings."""
    pressed = h.dc.press(card.id, OWNER, label=label)
    done = await h.dc.await_for(lambda: (m := h.dc.message(card.id)).components == [] and m, 15)
    assert done.content.endswith(result), done.content
    sent = requests_of_press(h.dc, pressed)
    assert sent and all(suppresses_pings(body.get("allowed_mentions")) for body in sent), sent
    assert h.dc.unsuppressed == []


async def test_ask_user_option_press_edit_pings_nobody(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(
        reply_tools(ToolUse("ask_user", {"question": QUESTION, "options": ["@everyone", "web-2"]})),
        reply_text("Restarting web-2 now."),
    )
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "restart the server that is down")
        card = await h.bot_text(dm, lambda t: t == f"❓ {QUESTION}")
        await pressed_and_edited(h, card, "web-2", "web-2")
        await h.bot_text(dm, lambda t: t == "Restarting web-2 now.")


async def test_jobs_card_press_edit_pings_nobody(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(
        reply_tools(ToolUse("schedule", {"action": "create", "name": "water", "prompt": "Remind me", "every_minutes": 30})),
        reply_text("Every 30 minutes."),
    )
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "remind me to drink water every half hour")
        await h.bot_text(dm, lambda t: t == "Every 30 minutes.")
        (job,) = await h.app.storage.list_jobs("main")
        dc.say(dm, OWNER, "/jobs")
        card = await h.bot_text(dm, lambda t: t.startswith(f"{job.id} · “water”"))
        label = next(lbl for lbl, cid in card.custom_ids.items() if cid == f"job:pause:{job.id}")
        await pressed_and_edited(h, card, label, "")
        paused = await h.app.storage.get_job(job.id)
        assert paused is not None and paused.state == "paused"


async def test_continue_press_edit_pings_nobody(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(Reply(Text("Looking at flights first.", chunk_size=50), Stall(60)))
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(dm, OWNER, "plan a trip to Rome")
        await h.bot_text(dm, lambda t: t.startswith("Looking at flights first."))
    # What a kill -9 mid-run leaves (tests/test_resume.py kills a real process for that).
    with sqlite3.connect(tmp_path / "home" / "roost.db") as db:
        db.execute("UPDATE runs SET status = 'interrupted'")
    fake_api.script(reply_text("Resumed: Rome it is."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        offer = await h.bot_text(dm, lambda t: t.startswith("I was restarted while working on:"))  # at start-up
        await pressed_and_edited(h, offer, "▶ Continue", "▶ Resuming.")
        await h.bot_text(dm, lambda t: t == "Resumed: Rome it is.", 15)
