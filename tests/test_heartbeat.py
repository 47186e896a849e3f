"""The heartbeat through the whole app on an injected clock: a `HEARTBEAT_OK` answer is not
delivered, any other answer reaches the owner, nothing runs outside active hours or when
HEARTBEAT.md lists no task."""

from __future__ import annotations

from datetime import UTC, datetime

from bot import heartbeat
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, running_at, tick
from tests.telegram_harness import OWNER, Harness, tg  # noqa: F401  (fixture)

NOON = datetime(2026, 11, 23, 11, 0, tzinfo=UTC)  # 12:00 in Berlin
NIGHT = datetime(2026, 11, 23, 22, 30, tzinfo=UTC)  # 23:30 in Berlin
TASKS = "# Heartbeat\n\n- If the build in ~/app failed, tell me.\n"
BEAT = {"every": 30, "active_hours": "08:00-22:00"}


async def beat(h: Harness, clock: FakeClock) -> None:
    clock.advance(minutes=30)
    await tick(h.app.scheduler)  # type: ignore[arg-type]
    await h.app.conversations.lanes.drain()


def plant(h: Harness, text: str) -> None:
    (h.workspace / heartbeat.FILE).write_text(text)


async def test_heartbeat_ok_is_not_delivered(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    clock = FakeClock(NOON)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="Europe/Berlin", heartbeat=BEAT) as h:
        plant(h, TASKS)
        fake_api.script(reply_text("HEARTBEAT_OK"))
        await beat(h, clock)
        assert len(fake_api.requests) == 1
        assert "If the build in ~/app failed, tell me." in str(fake_api.requests[0].json["messages"][-1])
    assert tg.bot_messages(OWNER) == []
    assert not [c for c in tg.calls if c.method in ("sendMessage", "editMessageText")]


async def test_any_other_heartbeat_answer_reaches_the_owner(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(NOON)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="Europe/Berlin", heartbeat=BEAT) as h:
        plant(h, TASKS)
        fake_api.script(reply_text("The build in ~/app failed at step 3."))
        await beat(h, clock)
        await h.says(OWNER, "The build in ~/app failed at step 3.")


async def test_nothing_runs_outside_active_hours(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    clock = FakeClock(NIGHT)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="Europe/Berlin", heartbeat=BEAT) as h:
        plant(h, TASKS)
        await beat(h, clock)
        await beat(h, clock)
    assert fake_api.requests == [] and tg.bot_messages(OWNER) == []


async def test_no_heartbeat_when_heartbeat_md_lists_no_task(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(NOON)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="Europe/Berlin", heartbeat=BEAT) as h:
        # the template as shipped: a heading, guidance and commented-out examples only
        assert heartbeat.read_tasks(h.workspace) is None
        await beat(h, clock)
    assert fake_api.requests == []


def test_active_hours_across_midnight_and_task_detection() -> None:
    night = heartbeat.ActiveHours.parse("22:00-06:00")
    assert night.contains(datetime(2026, 1, 1, 23, 0)) and night.contains(datetime(2026, 1, 1, 5, 59))
    assert not night.contains(datetime(2026, 1, 1, 12, 0))
    assert heartbeat.tasks("<!--\n- hidden\n-->\n# H\n1. check mail\n") == ["1. check mail"]
    assert heartbeat.is_silent(" HEARTBEAT_OK.\n") and not heartbeat.is_silent("HEARTBEAT_OK but the disk is full")
