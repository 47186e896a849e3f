"""/jobs over the wire: one card per job with next run, statuses and the misfire policy;
Cancel → gone and never fires, Run now → runs once, a non-owner's press changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import StoredMessage
from tests.scheduler_support import FakeClock, make_job, tick
from tests.telegram_harness import OWNER, STRANGER, Harness, running, tg  # noqa: F401  (fixture)

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


def buttons(message: StoredMessage) -> dict[str, str]:
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def press(h: Harness, card: StoredMessage, label: str, user: int = OWNER) -> dict[str, Any]:
    query = h.tg.press_button(OWNER, card.message_id, user, buttons(card)[label], first_name="X")
    state = await h.tg.await_for(lambda: h.tg.callback_query(query).answered and h.tg.callback_query(query))
    return state.answer or {}


async def card_of(h: Harness, job_id: str) -> StoredMessage:
    h.tg.send_private(OWNER, "/jobs")
    return await h.bot_text(OWNER, lambda t: t.startswith(f"{job_id} · "))


async def test_jobs_card_shows_schedule_statuses_and_misfire_policy(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, timezone="Europe/Berlin") as h:
        job = await make_job(h, FakeClock(T0), OWNER, "ok", name="stretch", prompt="stretch", every_minutes=60)
        card = await card_of(h, job.id)
        assert "every 1 hour" in (card.text or "") and "next: 2026-11-23 10:00 (Europe/Berlin)" in (card.text or "")
        assert "runs once when up to 30 min late, otherwise skipped and you are asked" in (card.text or "")
        assert set(buttons(card)) == {"▶ Run now", "⏸ Pause", "✖ Cancel"}
        assert all(len(d.encode()) <= 64 for d in buttons(card).values())
        await h.says(OWNER, "1 scheduled job (times in Europe/Berlin).")


async def test_cancel_button_removes_the_job_and_it_never_fires(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        job = await make_job(h, clock, OWNER, "ok", name="ping", prompt="ping", delay_minutes=5)
        card = await card_of(h, job.id)
        answer = await press(h, card, "✖ Cancel")
        assert answer.get("text") == "✖ Cancelled “ping”."
        assert await h.app.storage.list_jobs() == []
        clock.advance(minutes=10)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2  # the creating turn only


async def test_run_now_runs_once_and_a_non_owner_press_changes_nothing(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        job = await make_job(h, clock, OWNER, "ok", name="report", prompt="report", every_minutes=120)
        card = await card_of(h, job.id)
        refused = await press(h, card, "▶ Run now", user=STRANGER)
        assert refused == {"text": "Only my owner can manage scheduled jobs.", "show_alert": True}
        assert tg.message(OWNER, card.message_id).edits == []
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2

        fake_api.script(reply_text("All green."))
        answer = await press(h, card, "▶ Run now")
        assert answer.get("text") == "▶ Running “report” now."
        await h.says(OWNER, "⏰ report\n\nAll green.")
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 3
        (after,) = await h.app.storage.list_jobs()
        assert after.state == "active" and after.next_run_at == job.next_run_at  # the schedule is unchanged
        assert (after.last_exec, after.last_delivery) == ("ok", "delivered")
