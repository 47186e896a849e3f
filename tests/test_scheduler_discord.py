"""Scheduled jobs on Discord through the whole app: the fake model calls `schedule` in a
Discord DM or channel, the scheduler fires on an injected clock, and the named answer
arrives once in that Discord chat; /jobs cards' buttons work there and refuse a non-owner."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.discord_harness import CHANNEL, MEMBER, OWNER, Harness, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.discord_api import FakeDiscord
from tests.scheduler_support import FakeClock, tick

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
CHANNEL_WRITES = {"groups": {f"discord:{CHANNEL}": {"write": "allow"}}}
MENTION = "<@900000000000000001>"


def schedule(**args: object) -> ToolUse:
    return ToolUse("schedule", {"action": "create", **args})


async def fire(h: Harness, clock: FakeClock, minutes: float) -> None:
    clock.advance(minutes=minutes)
    await tick(h.app.scheduler)  # type: ignore[arg-type]


def count(h: Harness, channel: str, text: str) -> int:
    return [m.content for m in h.dc.bot_messages(channel)].count(text)


async def test_reminder_made_in_a_discord_dm_fires_once_in_that_dm(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    fake_api.script(
        reply_tools(schedule(name="call Ana", prompt="Remind me to call Ana", delay_minutes=20)),
        reply_text("Okay, in 20 minutes."),
        reply_text("Time to call Ana!"),
    )
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        h.app.scheduler.clock = clock  # type: ignore[union-attr]
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "remind me in 20 minutes to call Ana")
        await h.bot_text(dm, lambda t: t == "Okay, in 20 minutes.")
        (job,) = await h.app.storage.list_jobs("main")
        assert (job.platform, job.chat_id) == ("discord", dm)
        await fire(h, clock, 20)
        await h.bot_text(dm, lambda t: t == "⏰ call Ana\n\nTime to call Ana!")
        await h.app.conversations.lanes.drain()
        await fire(h, clock, 20)
        await h.app.conversations.lanes.drain()
        assert count(h, dm, "⏰ call Ana\n\nTime to call Ana!") == 1
        assert len(fake_api.requests) == 3
        ran = await h.app.storage.get_job(job.id)
        assert ran is not None and (ran.state, ran.last_exec, ran.last_delivery) == ("done", "ok", "delivered")


async def test_reminder_made_in_a_discord_channel_fires_once_in_that_channel(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    fake_api.script(
        reply_tools(schedule(name="standup", prompt="Post the standup reminder", delay_minutes=5)),
        reply_text("Scheduled."),
        reply_text("Standup in 5!"),
    )
    async with running(tmp_path, dc, fake_api, paced=False, policy=CHANNEL_WRITES) as h:
        h.app.scheduler.clock = clock  # type: ignore[union-attr]
        dc.say(CHANNEL, MEMBER, f"{MENTION} remind us about standup", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: t == "Scheduled.")
        (job,) = await h.app.storage.list_jobs()
        assert job.session_key == f"group:discord:{CHANNEL}" and job.chat_id == CHANNEL
        await fire(h, clock, 5)
        await h.bot_text(CHANNEL, lambda t: t == "⏰ standup\n\nStandup in 5!")
        await h.app.conversations.lanes.drain()
        await fire(h, clock, 5)
        await h.app.conversations.lanes.drain()
        assert count(h, CHANNEL, "⏰ standup\n\nStandup in 5!") == 1
        assert not any("Standup in 5" in m.content for m in dc.bot_messages(dc.dm_channel(OWNER)))


async def test_jobs_buttons_on_discord_refuse_a_non_owner_and_cancel_stops_the_job(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    fake_api.script(reply_tools(schedule(name="water", prompt="Remind me to drink water", every_minutes=30)),
                    reply_text("Every 30 minutes."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        h.app.scheduler.clock = clock  # type: ignore[union-attr]
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "remind me to drink water every half hour")
        await h.bot_text(dm, lambda t: t == "Every 30 minutes.")
        (job,) = await h.app.storage.list_jobs("main")

        dc.say(dm, OWNER, "/jobs")
        card = await h.bot_text(dm, lambda t: t.startswith(f"{job.id} · “water”"))
        assert set(card.custom_ids.values()) == {f"job:run:{job.id}", f"job:pause:{job.id}", f"job:cancel:{job.id}"}

        refused = dc.press(card.id, MEMBER, f"job:cancel:{job.id}")
        note = await dc.await_for(
            lambda: [f["content"] for f in dc.interaction(refused).followups if f["flags"] & 64] or None
        )
        assert note == ["Only my owner can manage scheduled jobs."]
        still = await h.app.storage.get_job(job.id)
        assert still is not None and still.state == "active"

        fake_api.script(reply_text("Drink some water."))
        ran = dc.press(card.id, OWNER, f"job:run:{job.id}")
        await dc.await_for(lambda: dc.interaction(ran).acknowledged or None)
        await h.bot_text(dm, lambda t: t == "⏰ water\n\nDrink some water.")
        await h.app.conversations.lanes.drain()

        pressed = await dc.await_for(lambda: (m := dc.message(card.id)).components == [] and m)
        assert pressed.content.endswith("▶ Running “water” now.")  # a done press retires the card's buttons

        dc.say(dm, OWNER, "/jobs")
        fresh = await h.bot_text(dm, lambda t: t.startswith(f"{job.id} · “water”") and "last:" in t)
        dc.press(fresh.id, OWNER, f"job:cancel:{job.id}")
        done = await dc.await_for(lambda: (m := dc.message(fresh.id)).components == [] and m)
        assert "cancel" in done.content.lower(), done.content
        gone = await h.app.storage.get_job(job.id)
        assert gone is not None and gone.state == "cancelled"
        await fire(h, clock, 60)
        await h.app.conversations.lanes.drain()
        assert count(h, dm, "⏰ water\n\nDrink some water.") == 1
        assert len(fake_api.requests) == 3  # the cancelled job never reached the model again
