"""Scheduled jobs through the whole app: the fake model calls `schedule`, the scheduler fires
on an injected clock, and the answer arrives in the fake Bot API chat — once."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, tick
from tests.telegram_harness import OWNER, Harness, running, tg  # noqa: F401  (fixture)

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


def schedule(**args: object) -> ToolUse:
    return ToolUse("schedule", {"action": "create", **args})


async def created(h: Harness, clock: FakeClock, text: str, ack: str) -> None:
    h.app.scheduler.clock = clock  # type: ignore[union-attr]
    h.tg.send_private(OWNER, text)
    await h.says(OWNER, ack)


async def test_reminder_created_through_the_tool_fires_once_in_its_chat(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    fake_api.script(
        reply_tools(schedule(name="call Ana", prompt="Remind me to call Ana", delay_minutes=20)),
        reply_text("Okay, in 20 minutes."),
        reply_text("Time to call Ana!"),
    )
    async with running(tmp_path, tg, fake_api, paced=False, timezone="Europe/Berlin") as h:
        await created(h, clock, "remind me in 20 minutes to call Ana", "Okay, in 20 minutes.")
        scheduler = h.app.scheduler
        assert scheduler is not None
        (job,) = await h.app.storage.list_jobs("main")
        assert job.next_run_at == datetime(2026, 11, 23, 8, 20, tzinfo=UTC)
        await tick(scheduler)  # not due yet: nothing runs
        assert len(fake_api.requests) == 2

        clock.advance(minutes=20)
        await tick(scheduler)
        await h.says(OWNER, "⏰ call Ana\n\nTime to call Ana!")
        await h.app.conversations.lanes.drain()
        clock.advance(minutes=5)
        await tick(scheduler)
        await tick(scheduler)
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 3
        assert [m.text for m in tg.bot_messages(OWNER)].count("⏰ call Ana\n\nTime to call Ana!") == 1
        ran = await h.app.storage.get_job(job.id)
        assert ran is not None and ran.state == "done"
        assert (ran.last_exec, ran.last_delivery) == ("ok", "delivered")
        # the job's prompt reached the model in the main session, named as a scheduled job
        assert "Remind me to call Ana" in str(fake_api.requests[2].json["messages"][-1])
