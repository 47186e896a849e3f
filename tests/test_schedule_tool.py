"""The `schedule` tool: unusable schedules come back to the model as clear tool errors, and
cron jobs fire at the right local time across both DST changes (the library's arithmetic,
pinned here with an injected clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bot.scheduling import schedules
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, make_job, running_at, tick
from tests.telegram_harness import OWNER, tg  # noqa: F401  (fixture)

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


def tool_results(fake_api: FakeAnthropic, request: int) -> list[dict[str, Any]]:
    content = user_blocks(fake_api.requests[request].json)
    return [b for b in content if b["type"] == "tool_result"]


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


async def test_invalid_schedules_come_back_as_clear_tool_errors(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    calls = [
        {"action": "create", "prompt": "x", "cron": "every blursday"},
        {"action": "create", "prompt": "x", "cron": "0 0 9 * * 1"},
        {"action": "create", "prompt": "x", "at": "2026-11-23 08:30"},  # 08:30 Berlin = 07:30 UTC: past
        {"action": "create", "prompt": "x", "at": "next blursday"},
        {"action": "create", "prompt": "x", "every_minutes": 0.2},
        {"action": "create", "prompt": "x"},
        {"action": "cancel", "job_id": "deadbeef"},
    ]
    fake_api.script(reply_tools(*(ToolUse("schedule", c) for c in calls)), reply_text("Sorry."))
    async with running_at(tmp_path, tg, fake_api, FakeClock(T0), timezone="Europe/Berlin") as h:
        h.tg.send_private(OWNER, "schedule nonsense")
        await h.says(OWNER, "Sorry.")
        results = tool_results(fake_api, 1)
        assert await h.app.storage.list_jobs(include_ended=True) == []
    assert all(r.get("is_error") for r in results)
    texts = [text_of(r) for r in results]
    assert "cron 'every blursday' has 2 field(s); use exactly 5" in texts[0]
    assert "cron '0 0 9 * * 1' has 6 field(s); use exactly 5" in texts[1] and "no seconds field" in texts[1]
    assert "2026-11-23 08:30 (Europe/Berlin) is in the past; it is now 2026-11-23 09:00" in texts[2]
    assert "cannot read the time 'next blursday'" in texts[3]
    assert "at least 1 minute" in texts[4]
    assert "exactly one of at, delay_minutes, every_minutes, cron" in texts[5]
    assert "no job 'deadbeef' in this chat" in texts[6]


@pytest.mark.parametrize(
    ("created", "before", "due", "following"),
    [
        # spring forward (29 Mar 2026, 02:00 → 03:00 in Berlin): 09:00 is 07:00 UTC from that day on
        (datetime(2026, 3, 28, 10, tzinfo=UTC), datetime(2026, 3, 29, 6, 59, tzinfo=UTC),
         datetime(2026, 3, 29, 7, 0, tzinfo=UTC), datetime(2026, 3, 30, 7, 0, tzinfo=UTC)),
        # fall back (25 Oct 2026, 03:00 → 02:00): 09:00 is 08:00 UTC from that day on
        (datetime(2026, 10, 24, 10, tzinfo=UTC), datetime(2026, 10, 25, 7, 59, tzinfo=UTC),
         datetime(2026, 10, 25, 8, 0, tzinfo=UTC), datetime(2026, 10, 26, 8, 0, tzinfo=UTC)),
    ],
    ids=["spring-forward", "fall-back"],
)
async def test_cron_fires_at_local_time_across_a_dst_change(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic,
    created: datetime, before: datetime, due: datetime, following: datetime,
) -> None:
    clock = FakeClock(created)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="Europe/Berlin") as h:
        job = await make_job(h, clock, OWNER, "ok", name="weather", prompt="weather summary", cron="0 9 * * *")
        assert job.next_run_at == due
        clock.now = before
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2  # 08:59 local: not yet
        fake_api.script(reply_text("Sunny."))
        clock.now = due
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.says(OWNER, "⏰ weather\n\nSunny.")
        after = await h.app.storage.get_job(job.id)
    assert after is not None and after.next_run_at == following and after.last_run_at == due


def test_grace_is_half_the_interval_at_most_an_hour_and_a_day_for_one_offs() -> None:
    now = datetime(2026, 11, 23, 8, tzinfo=UTC)
    assert schedules.interval(20, "UTC").grace(now).total_seconds() == 600
    assert schedules.interval(600, "UTC").grace(now).total_seconds() == 3600
    assert schedules.cron("*/10 * * * *", "UTC").grace(now).total_seconds() == 300
    assert schedules.cron("0 9 * * 1-5", "UTC").grace(now).total_seconds() == 3600
    assert schedules.one_off(now, "UTC", delay_minutes=5).grace(now).total_seconds() == 86400
