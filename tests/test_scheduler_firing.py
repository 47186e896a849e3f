"""What fires, and when: a job fires only while it is active at the due time the scheduler
saw (a Cancel or Pause that wins the race against a tick is obeyed), and a cron job fires once
per wall-clock due time across both DST changes (the repeated hour's second 01:30 never; a
time the spring-forward gap skips once, just after the gap)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from bot.storage.jobs import JobRow
from tests.fakes.anthropic_api import FakeAnthropic
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
