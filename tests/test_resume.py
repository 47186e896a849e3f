"""Resume after a crash: a real `roost run` is killed (SIGKILL) mid-run; the next start
sends one offer to continue, with a Continue button that resumes from the stored transcript;
the offer is never repeated by later starts, a second press does nothing, and the next
request is valid for the strict fake."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from adapters.render.markdown import render_markdown
from bot.resume import offer_text
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, ToolUse, is_context_tail, last_user_text, user_texts
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import StoredMessage
from tests.telegram_harness import OWNER, STRANGER, Harness, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_restart import recorded, roost_run

REQUEST = "plan my trip to Rome"
OFFER = offer_text(REQUEST)


def buttons(message: StoredMessage) -> dict[str, str]:
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def press(h: Harness, message: StoredMessage, data: str, user: int = OWNER) -> dict[str, Any]:
    query = h.tg.press_button(OWNER, message.message_id, user, data, first_name="Olivia", require_button=False)
    state = await h.tg.await_for(lambda: h.tg.callback_query(query).answered and h.tg.callback_query(query))
    return state.answer or {}


def offers(tg: FakeTelegram) -> list[StoredMessage]:
    return [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("I was restarted while working on:")]


async def kill_mid_run(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    shown = "Looking at flights and hotels for Rome first."
    fake_api.script(Reply(Text(shown, chunk_size=50), Stall(60)))
    process = roost_run(tmp_path, tg, fake_api)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        tg.send_private(OWNER, REQUEST)
        visible = render_markdown(shown).text
        await tg.await_for(lambda: any(m.text == visible for m in tg.bot_messages(OWNER)), timeout=15)
        await recorded(tmp_path / "home" / "roost.db", visible)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def test_kill_9_mid_run_offers_resume_once_and_continue_resumes_from_the_transcript(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    await kill_mid_run(tmp_path, tg, fake_api)
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))

    async with running(tmp_path, tg, fake_api) as h:
        offer = await h.says(OWNER, OFFER, timeout=15)
        data = buttons(offer)["▶ Continue"]
        assert data.startswith("resume:") and len(data.encode()) <= 64
        interrupted = await h.app.storage.get_run(data.removeprefix("resume:"))
        assert interrupted is not None and interrupted.status == "interrupted"

        answer = await press(h, offer, data)
        assert answer.get("text") == "▶ Resuming."
        await h.says(OWNER, "answer to continue", timeout=15)
        # Resumed from the stored transcript: the cut-off request is there, then "continue".
        resumed = fake_api.requests[-1].json["messages"]
        texts = [b["text"] for m in resumed if m["role"] == "user"
                 for b in m["content"] if b["type"] == "text" and not is_context_tail(b)]  # fmt: skip
        assert texts == [REQUEST, "continue"]
        # The offer lost its button and says what happened.
        shown = await h.bot_text(OWNER, lambda t: t.startswith(OFFER) and t.endswith("▶ Resuming."))
        assert not buttons(shown)

        again = await press(h, offer, data)  # a stale client presses once more
        assert again.get("show_alert") is True
        requests = len(fake_api.requests)

        tg.send_private(OWNER, "and the museums?")
        await h.says(OWNER, "answer to and the museums?", timeout=15)
        assert len(fake_api.requests) == requests + 1  # the next request is valid (strict fake)

    async with running(tmp_path, tg, fake_api) as h:  # a later start offers nothing again
        await h.app.conversations.lanes.drain()
        assert len(offers(tg)) == 1


async def test_only_the_asker_or_the_owner_may_press_continue(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    await kill_mid_run(tmp_path, tg, fake_api)
    async with running(tmp_path, tg, fake_api) as h:
        offer = await h.says(OWNER, OFFER, timeout=15)
        requests = len(fake_api.requests)
        refused = await press(h, offer, buttons(offer)["▶ Continue"], user=STRANGER)
        assert refused.get("show_alert") is True
        assert len(fake_api.requests) == requests
        assert buttons((await h.says(OWNER, OFFER)))  # still offered


async def test_kill_9_while_an_approval_waits_closes_the_card_and_continue_gives_a_valid_request(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text("I'll list the files. "), ToolUse("exec", {"command": "ls -la ~/projects"})))
    process = roost_run(tmp_path, tg, fake_api)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        tg.send_private(OWNER, "what is in my projects folder?")
        card = await tg.await_for(
            lambda: next((m for m in tg.bot_messages(OWNER) if buttons(m) and "ls -la" in (m.text or "")), None),
            timeout=15,
        )
        await approval_placed(tmp_path / "home" / "roost.db")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))

    async with running(tmp_path, tg, fake_api) as h:
        # What `roost run` does at start after recovering deliveries (bot/cli.py).
        await h.app.conversations.close_expired_cards(h.app.expired_at_start)
        closed = await h.bot_text(OWNER, lambda t: "ls -la" in t and "Expired" in t)
        assert closed.message_id == card.message_id and not buttons(closed)  # never left live
        offer = await h.says(OWNER, offer_text("what is in my projects folder?"), timeout=15)
        await press(h, offer, buttons(offer)["▶ Continue"])
        await h.says(OWNER, "answer to continue", timeout=15)
        # The cut-off tool call was answered in the transcript sent (the strict fake checks
        # every tool_use has its tool_result), then "continue".
        sent = fake_api.requests[-1].json["messages"]
        assert any(b.get("type") == "tool_use" for m in sent if m["role"] == "assistant" for b in m["content"])
        assert user_texts(fake_api.requests[-1].json)[-1] == "continue"


async def approval_placed(db: Path, timeout: float = 10.0) -> None:
    """Wait until the other process stored where its approval card is (polls its database
    read-only with a deadline; the condition decides, not the time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                if conn.execute("SELECT 1 FROM approvals WHERE chat_ref IS NOT NULL").fetchone():
                    return
        except sqlite3.OperationalError:  # not created or locked yet
            pass
        await asyncio.sleep(0.02)  # timing-ok: re-check a condition in another process
    raise TimeoutError("approval card not recorded")


async def test_continue_on_an_interrupted_isolated_job_resumes_in_the_jobs_own_session(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Not in the chat's ordinary session: the resumed request is the job's transcript (its
    prompt, then "continue"), never the chat's history."""
    from datetime import UTC, datetime, timedelta

    from tests.scheduler_support import FakeClock, make_job, running_at

    # Made in the owner's chat five minutes before it was due, which is now: `roost run`
    # (the real clock) fires it at start.
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=10))
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        await make_job(h, clock, OWNER, "ok", name="report", prompt="Write the daily report",
                             delay_minutes=5, isolated=True)  # fmt: skip
    shown = "Collecting today's numbers for the report."
    fake_api.script(Reply(Text(shown, chunk_size=50), Stall(60)))
    process = roost_run(tmp_path, tg, fake_api)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        visible = render_markdown(f"⏰ report\n\n{shown}").text
        await tg.await_for(lambda: any(m.text == visible for m in tg.bot_messages(OWNER)), timeout=15)
        await recorded(tmp_path / "home" / "roost.db", visible)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))

    async with running(tmp_path, tg, fake_api) as h:
        offer = await h.bot_text(OWNER, lambda t: t.startswith("I was restarted while working on: [Scheduled job"),
                                 timeout=15)  # fmt: skip
        assert (await press(h, offer, buttons(offer)["▶ Continue"])).get("text") == "▶ Resuming."
        await h.says(OWNER, "answer to continue", timeout=15)
        resumed = fake_api.requests[-1].json["messages"]
        texts = [b["text"] for m in resumed if m["role"] == "user"
                 for b in m["content"] if b["type"] == "text" and not is_context_tail(b)]  # fmt: skip
    assert len(texts) == 2 and texts[0].endswith("Write the daily report") and texts[1] == "continue", texts
    assert not any("schedule it" in t for t in texts)  # the chat's own history is not this session
