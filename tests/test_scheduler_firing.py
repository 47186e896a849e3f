"""What fires, and when: a job fires only while it is active at the due time the scheduler
saw (a Cancel or Pause that wins the race against a tick is obeyed), and a cron job fires once
per wall-clock due time across both DST changes (the repeated hour's second 01:30 never; a
time the spring-forward gap skips once, just after the gap)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from bot.scheduling import schedules
from bot.storage.jobs import JobRow
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, make_job, running_at, tick
from tests.telegram_harness import OWNER, tg  # noqa: F401  (fixture)

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("op", "schedule", "state"),
    [("cancel", {"delay_minutes": 20}, "cancelled"), ("pause", {"every_minutes": 20}, "paused"),
     ("cancel", {"every_minutes": 20}, "cancelled")],
    ids=["cancel-one-off", "pause-recurring", "cancel-recurring"],
)
async def test_cancel_or_pause_committed_while_a_tick_holds_the_due_job_never_runs_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic, op: str, schedule: dict[str, object], state: str
) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        scheduler = h.app.scheduler
        assert scheduler is not None
        job = await make_job(h, clock, OWNER, "ok", name="call Ana", prompt="call Ana", **schedule)
        listed, release = asyncio.Event(), asyncio.Event()

        async def hold(due: Sequence[JobRow]) -> None:
            if any(j.id == job.id for j in due):
                listed.set()
                await release.wait()

        scheduler.due_listed = hold
        clock.advance(minutes=20)
        scheduler.wake()
        await asyncio.wait_for(listed.wait(), 10)  # the tick holds the job as due
        assert (await scheduler.operate(op, job.id)).startswith(("✖", "⏸"))  # committed now
        release.set()
        await tick(scheduler)
        await h.app.conversations.lanes.drain()
        after = await h.app.storage.get_job(job.id)
        texts = [m.text or "" for m in tg.bot_messages(OWNER)]
    assert len(fake_api.requests) == 2  # the creating turn only: the job never ran
    assert not any(t.startswith("⏰") for t in texts)  # neither ran nor "missed"
    assert after is not None and after.state == state and after.last_run_at is None


NY = "America/New_York"
FALL_BACK = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)  # 02:00 EDT → 01:00 EST: 01:00–02:00 twice
SPRING_FORWARD = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 02:00 EST → 03:00 EDT: 02:00–03:00 never


def utc(month: int, day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "created", "due", "seen", "runs", "following"),
    [
        # fall back: 01:30 EDT is 05:30 UTC; the second 01:30 (EST, 06:30 UTC) is not a new due time
        ("30 1 * * *", utc(10, 31, 12), utc(11, 1, 5, 30), utc(11, 1, 5, 30), True, utc(11, 2, 6, 30)),
        # 50 min late in real time, though the clock on the wall (01:20 EST) shows 10 min early
        ("30 1 * * *", utc(10, 31, 12), utc(11, 1, 5, 30), utc(11, 1, 6, 20), True, utc(11, 2, 6, 30)),
        # 65 min late in real time, though the wall clock (01:35 EST) shows 5 min late: missed
        ("30 1 * * *", utc(10, 31, 12), utc(11, 1, 5, 30), utc(11, 1, 6, 35), False, utc(11, 2, 6, 30)),
        # spring forward: 02:30 does not exist that day; it runs once, at 03:00 EDT (07:00 UTC)
        ("30 2 * * *", utc(3, 7, 12), utc(3, 8, 7), utc(3, 8, 7), True, utc(3, 9, 6, 30)),
        # 50 min late in real time (03:50 EDT), though 80 min past "02:30" on the wall
        ("30 2 * * *", utc(3, 7, 12), utc(3, 8, 7), utc(3, 8, 7, 50), True, utc(3, 9, 6, 30)),
        ("30 2 * * *", utc(3, 7, 12), utc(3, 8, 7), utc(3, 8, 8, 5), False, utc(3, 9, 6, 30)),
    ],
    ids=["fall-back", "fall-back-50-min-late", "fall-back-65-min-late",
         "spring-forward", "spring-forward-50-min-late", "spring-forward-65-min-late"],
)
async def test_a_daily_cron_runs_once_per_night_across_dst_and_its_grace_is_real_time(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic,
    cron: str, created: datetime, due: datetime, seen: datetime, runs: bool, following: datetime,
) -> None:
    clock = FakeClock(created)
    async with running_at(tmp_path, tg, fake_api, clock, timezone=NY) as h:
        scheduler = h.app.scheduler
        assert scheduler is not None
        job = await make_job(h, clock, OWNER, "ok", name="nightly", prompt="nightly backup report", cron=cron)
        assert (job.next_run_at, job.grace_s) == (due, 3600)  # half a day's interval, capped at 1 h
        fake_api.script(*(reply_text(f"Report {n}.") for n in range(3)))
        clock.now = seen
        await tick(scheduler)
        await h.app.conversations.lanes.drain()
        # the rest of the night, minute by minute: the repeated hour's second pass, the gap's end
        clock.now = seen.replace(hour=4, minute=0)
        while clock.now < seen.replace(hour=10):
            clock.advance(minutes=5)
            if clock.now > seen:
                await tick(scheduler)
        await h.app.conversations.lanes.drain()
        after = await h.app.storage.get_job(job.id)
        notices = [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("⏰")]
    assert after is not None and after.next_run_at == following and after.state == "active"
    if runs:
        assert notices == ["⏰ nightly\n\nReport 0."]  # once, not once per 01:30 on the wall
        assert after.last_run_at == due
    else:
        assert len(notices) == 1 and notices[0].startswith("⏰ Missed “nightly”"), notices
        assert after.missed_at == due and after.last_run_at is None
    assert len(fake_api.requests) == 2 + runs


@pytest.mark.parametrize(
    ("transition", "expected"),
    [
        (FALL_BACK, ["01:00 EDT", "01:30 EDT", "02:00 EST", "02:30 EST"]),
        (SPRING_FORWARD, ["01:00 EST", "01:30 EST", "03:00 EDT", "03:30 EDT"]),
    ],
    ids=["fall-back", "spring-forward"],
)
def test_a_half_hourly_cron_fires_each_wall_clock_time_once_and_the_gap_once(
    transition: datetime, expected: list[str]
) -> None:
    schedule = schedules.cron("*/30 * * * *", NY)
    at, shown = transition - timedelta(hours=2, minutes=1), []
    while len(shown) < len(expected):
        nxt = schedule.next_after(at)
        assert nxt is not None and nxt > at
        at = nxt
        if at >= transition - timedelta(hours=1):
            shown.append(f"{at.astimezone(schedule.zone):%H:%M %Z}")
    assert shown == expected


def test_a_one_off_at_a_wall_time_dst_repeats_or_skips_is_its_first_occurrence_or_the_gaps_end() -> None:
    now = utc(1, 1, 0)
    assert schedules.one_off(now, NY, at="2026-11-01 01:30").spec == utc(11, 1, 5, 30).isoformat()
    assert schedules.one_off(now, NY, at="2026-03-08 02:30").spec == utc(3, 8, 7).isoformat()


@pytest.mark.parametrize(
    ("expression", "grace_minutes"),
    [("30 1 * * *", 60), ("30 2 * * *", 60), ("*/30 * * * *", 15), ("0 * * * *", 30), ("30 1,2 * * *", 30)],
)
@pytest.mark.parametrize("transition", [FALL_BACK, SPRING_FORWARD], ids=["fall-back", "spring-forward"])
def test_a_crons_grace_is_half_its_real_interval_whenever_it_is_made_near_a_dst_change(
    expression: str, grace_minutes: int, transition: datetime
) -> None:
    """Created any time in the 30 hours before the change to 6 hours after: the same grace."""
    schedule = schedules.cron(expression, NY)
    now = transition - timedelta(hours=30)
    while now < transition + timedelta(hours=6):
        assert schedule.grace(now) == timedelta(minutes=grace_minutes), now
        now += timedelta(minutes=10)
