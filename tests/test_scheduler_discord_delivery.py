"""A scheduled job's answer on Discord shows exactly once when sends lose their answers: every
attempt of one delivery carries the same nonce (the fake, like Discord, answers a repeated
nonce with the message already posted), and a part whose fate cannot be found out is never
sent again — the owner is told instead (tests/test_scheduler_delivery.py for Telegram)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from tests.discord_harness import OWNER, Harness, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.discord_api import FakeDiscord
from tests.scheduler_support import FakeClock, Parked, no_wait, tick

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
ANSWER = "⏰ standup\n\nStandup: all good, nothing blocked today."


async def standup_in_dm(
    h: Harness, clock: FakeClock, *, sleep: Callable[[float], Awaitable[None]] = no_wait
) -> tuple[str, str]:
    """The owner schedules a job in their DM; returns (dm channel, job id)."""
    h.app.scheduler.clock = clock  # type: ignore[union-attr]
    h.app.conversations.jobs.sends.sleep = sleep  # type: ignore[union-attr]
    h.llm.script(
        reply_tools(ToolUse("schedule", {"action": "create", "name": "standup", "prompt": "post the standup note",
                                         "delay_minutes": 5})),
        reply_text("Scheduled."),
        reply_text("Standup: all good, nothing blocked today."),
    )
    dm = h.dc.dm_channel(OWNER)
    h.dc.say(dm, OWNER, "schedule the standup note")
    await h.bot_text(dm, lambda t: t == "Scheduled.")
    (job,) = await h.app.storage.list_jobs()
    return dm, job.id


async def fire(h: Harness, clock: FakeClock) -> None:
    clock.advance(minutes=5)
    await tick(h.app.scheduler)  # type: ignore[arg-type]
    await h.app.conversations.lanes.drain()
    await h.app.conversations.jobs.drain()  # type: ignore[union-attr]


def texts(h: Harness, channel: str) -> list[str]:
    return [m.content for m in h.dc.bot_messages(channel)]


async def test_a_job_answer_whose_send_and_whose_check_lost_their_answers_shows_once(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The live send posts but its answer is lost; the stream's check (the same nonce again)
    loses its answer too, so the stream cannot tell: nothing is re-sent, the owner is told."""
    clock = FakeClock(T0)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm, job_id = await standup_in_dm(h, clock)
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        await fire(h, clock)
        report = await h.bot_text(dm, lambda t: t.startswith("⚠️ “standup” ran, but I cannot tell"))
        after = await h.app.storage.get_job(job_id)
    assert texts(h, dm).count(ANSWER) == 1
    assert [t.startswith("⚠️ “standup”") for t in texts(h, dm)].count(True) == 1 and report is not None
    assert after is not None and after.last_delivery == "unknown"


async def test_a_resend_that_loses_its_answer_twice_shows_once(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The live answer is refused (the stream gives up); the re-send posts but its answer is
    lost, and so is the next attempt's: one nonce for the delivery, so one message."""
    clock = FakeClock(T0)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm, job_id = await standup_in_dm(h, clock)
        dc.fail_next("POST", f"/channels/{dm}/messages", count=3)
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        await fire(h, clock)
        after = await h.app.storage.get_job(job_id)
    assert texts(h, dm).count(ANSWER) == 1
    assert not any(t.startswith("⚠️ “standup”") for t in texts(h, dm))
    assert after is not None and after.last_delivery == "delivered"


async def test_a_resend_after_a_partly_delivered_answer_repeats_nothing_that_arrived(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """An answer of two messages: the first arrives, the second is refused until the stream
    gives up. The re-send carries only the second; the first shows once."""
    clock = FakeClock(T0)
    paragraphs = [f"Item {n}: " + "all systems nominal, nothing to report here. " * 4 for n in range(16)]
    long_answer = "\n\n".join(paragraphs)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        h.app.scheduler.clock = clock  # type: ignore[union-attr]
        h.app.conversations.jobs.sends.sleep = no_wait  # type: ignore[union-attr]
        h.llm.script(
            reply_tools(ToolUse("schedule", {"action": "create", "name": "standup", "prompt": "post the status",
                                             "delay_minutes": 5})),
            reply_text("Scheduled."),
            reply_text(long_answer),
        )
        dm = h.dc.dm_channel(OWNER)
        h.dc.say(dm, OWNER, "schedule the status")
        await h.bot_text(dm, lambda t: t == "Scheduled.")
        dc.fail_next("POST", f"/channels/{dm}/messages", count=3, after=1)  # the answer's second message
        await fire(h, clock)
        (job,) = await h.app.storage.list_jobs(include_ended=True)
    shown = texts(h, dm)
    with_first = [t for t in shown if "Item 0:" in t]
    with_last = [t for t in shown if "Item 15:" in t]
    assert len(with_first) == 1 and with_first[0].startswith("⏰ standup\n\n")
    assert len(with_last) == 1 and with_last[0].startswith("⏰ standup (continued)\n\n")
    assert with_first != with_last  # two messages: the part that arrived, then the rest
    assert all(sum(p.split(":")[0] + ":" in t for t in shown) == 1 for p in paragraphs)
    assert job.last_delivery == "delivered"


async def test_a_resend_lost_before_a_long_restart_is_not_posted_again_once_the_nonce_has_expired(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The re-send posts but its answer is lost; the app is down longer than Discord
    remembers a nonce. The next start cannot rely on the nonce, so it does not post again:
    the owner is told."""
    clock = FakeClock(T0)
    parked = Parked(after=1)  # the re-send's 10 s pass; the look that follows waits forever

    def parked_sends(app: Any) -> None:
        app.scheduler.clock = clock
        app.conversations.jobs.sends.sleep = parked

    async with running(tmp_path, dc, fake_api, paced=False, prepare=parked_sends) as h:
        dm, job_id = await standup_in_dm(h, clock, sleep=parked)
        dc.fail_next("POST", f"/channels/{dm}/messages", count=3)
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        clock.advance(minutes=5)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await parked.wait()
    assert texts(h, dm).count(ANSWER) == 1  # it did arrive
    dc.forget_nonces()
    clock.advance(minutes=10)
    async with running(tmp_path, dc, fake_api, paced=False, prepare=sleeping_at(clock)) as h:
        await h.bot_text(dm, lambda t: t.startswith("⚠️ “standup” ran, but I cannot tell"))
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    assert texts(h, dm).count(ANSWER) == 1
    assert after is not None and after.last_delivery == "unknown"


def sleeping_at(clock: FakeClock) -> Callable[[Any], None]:
    def prepare(app: Any) -> None:
        app.scheduler.clock = clock
        app.conversations.jobs.sends.sleep = no_wait

    return prepare
