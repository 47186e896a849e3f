"""Exactly once across restarts, and the misfire policy: the app is stopped and started again
on the same database with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, make_job, running_at, tick
from tests.telegram_harness import OWNER, Harness, tg  # noqa: F401  (fixture)
from tests.test_jobs_buttons import buttons, press

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


async def settled(h: Harness) -> None:
    assert h.app.scheduler is not None
    await tick(h.app.scheduler)
    await h.app.conversations.lanes.drain()


def count(tg: FakeTelegram, text: str) -> int:
    return [m.text for m in tg.bot_messages(OWNER)].count(text)


async def test_restart_between_creation_and_firing_still_fires_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        await make_job(h, clock, OWNER, "ok", name="call Ana", prompt="call Ana", delay_minutes=20)
    clock.advance(minutes=20)
    fake_api.script(reply_text("Call Ana now."))
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        await h.says(OWNER, "⏰ call Ana\n\nCall Ana now.")
        await settled(h)
    async with running_at(tmp_path, tg, fake_api, clock) as h:  # and once more: nothing again
        await settled(h)
    assert len(fake_api.requests) == 3
    assert count(tg, "⏰ call Ana\n\nCall Ana now.") == 1


async def test_restart_during_a_jobs_run_gives_one_answer_not_two(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    shown = "Checking the build log for you, one moment"
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        job = await make_job(h, clock, OWNER, "ok", name="build", prompt="check the build", delay_minutes=5)
        fake_api.script(Reply(Text(shown, chunk_size=50), Stall(30), Text(" and done.")))
        clock.advance(minutes=5)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.bot_text(OWNER, lambda t: t.startswith(f"⏰ build\n\n{shown}"))
    # stopped mid-run; the next start neither repeats the run nor sends the answer again
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        await settled(h)
        after = await h.app.storage.get_job(job.id)
    assert len(fake_api.requests) == 3
    answers = [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("⏰ build")]
    assert len(answers) == 1
    assert after is not None and after.state == "done" and after.last_exec == "interrupted"


async def test_missed_within_grace_runs_once_at_start(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        job = await make_job(h, clock, OWNER, "ok", name="hourly", prompt="check", every_minutes=60)
    clock.advance(minutes=90)  # down at 09:00: found 30 min late, within its grace of half the interval
    fake_api.script(reply_text("Checked."))
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        await h.says(OWNER, "⏰ hourly\n\nChecked.")
        await settled(h)
        after = await h.app.storage.get_job(job.id)
    assert len(fake_api.requests) == 3 and count(tg, "⏰ hourly\n\nChecked.") == 1
    assert after is not None and after.next_run_at == datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


async def test_missed_beyond_grace_is_skipped_the_owner_told_and_the_button_runs_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        job = await make_job(h, clock, OWNER, "ok", name="pay rent", prompt="remind me to pay rent", delay_minutes=60)
    clock.advance(hours=26)  # a one-off's grace is 24 h
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        notice = await h.bot_text(OWNER, lambda t: t.startswith("⏰ Missed “pay rent” at Mon 23 Nov 09:00"))
        assert "Run now?" in (notice.text or "")
        await settled(h)
        assert len(fake_api.requests) == 2  # skipped: not run
        missed = await h.app.storage.get_job(job.id)
        assert missed is not None and missed.state == "missed"  # kept, never dropped silently
        fake_api.script(reply_text("Pay the rent today."))
        answer = await press(h, notice, "▶ Run now")
        assert answer.get("text") == "▶ Running “pay rent” now."
        await h.says(OWNER, "⏰ pay rent\n\nPay the rent today.")
        await settled(h)
        done = await h.app.storage.get_job(job.id)
    assert done is not None and done.state == "done" and len(fake_api.requests) == 3
    assert buttons(tg.message(OWNER, notice.message_id)) == {}
