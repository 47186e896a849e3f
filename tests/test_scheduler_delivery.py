"""A scheduled job's answer and the scheduler's notices reach their chat exactly once, through
failures and restarts (Telegram; tests/test_scheduler_discord_delivery.py for Discord).

Invariant: every answer or notice the scheduler sends is, after any sequence of failed
sends, lost answers and restarts, either shown in its chat exactly once or reported to the
owner exactly once — never silently dropped, never shown twice. A notice (the owner's own
message: nobody to report it to) whose arrival cannot be told is sent again instead.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from adapters.stream import DeliveredPart
from bot.scheduling.runs import judge
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, Parked, make_job, no_wait, running_at, sleeping, tick
from tests.telegram_harness import GROUP, OWNER, Harness, tg  # noqa: F401  (fixture)
from tests.test_jobs_buttons import press
from tests.test_scheduler_scope import GROUP_WRITES, group_job

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
ANSWER = "⏰ standup\n\nStandup: all good, nothing blocked today."
KICKED = "Forbidden: bot was kicked from the group chat"


def texts(tg: FakeTelegram, chat: int) -> list[str]:
    return [m.text or "" for m in tg.bot_messages(chat)]


def reports(tg: FakeTelegram) -> list[str]:
    return [t for t in texts(tg, OWNER) if t.startswith("⚠️ “standup” ran")]


async def standup_fails_live(
    h: Harness, tg: FakeTelegram, clock: FakeClock, *, also: Callable[[], None] = lambda: None
) -> str:
    """A group job whose live answer is refused three times (the stream gives up on it);
    `also` adds faults once the job exists. Returns the job's id."""
    await group_job(h, "Scheduled.", name="standup", prompt="post the standup note", delay_minutes=5)
    (job,) = await h.app.storage.list_jobs()
    also()
    tg.fail_next("sendMessage", status=403, description=KICKED, count=3, chat_id=GROUP)
    h.llm.script(reply_text("Standup: all good, nothing blocked today."))
    clock.advance(minutes=5)
    await tick(h.app.scheduler)  # type: ignore[arg-type]
    return job.id


async def test_an_answer_waiting_to_be_resent_is_sent_once_after_a_restart(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    parked = Parked()
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(parked)) as h:
        job_id = await standup_fails_live(h, tg, clock)
        await parked.wait()  # the re-send waits its 10 s: stop the app now
        waiting = await h.app.storage.get_job(job_id)
        assert waiting is not None and waiting.last_delivery == "retrying"
    assert parked.waits == [10.0] and ANSWER not in texts(tg, GROUP)
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES) as h:
        await h.bot_text(GROUP, lambda t: t == ANSWER)
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES) as h:  # and again: nothing more
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
    assert texts(tg, GROUP).count(ANSWER) == 1 and reports(tg) == []
    assert after is not None and (after.last_exec, after.last_delivery) == ("ok", "delivered")


async def test_a_resend_failing_everywhere_after_a_restart_tells_the_owner_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    parked = Parked()
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(parked)) as h:
        job_id = await standup_fails_live(h, tg, clock)
        await parked.wait()
    tg.fail_next("sendMessage", status=403, description=KICKED, count=1000, chat_id=GROUP)
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        await h.bot_text(OWNER, lambda t: t.startswith("⚠️ “standup” ran but its answer could not be delivered"),
                         timeout=20)
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
    assert len(reports(tg)) == 1 and KICKED in reports(tg)[0]
    assert ANSWER not in texts(tg, GROUP)
    assert after is not None and after.last_delivery == "failed"


async def test_a_missed_run_notice_whose_send_fails_is_sent_later_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    missed = "⏰ Missed “pay rent” at Mon 23 Nov 09:00"
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        job = await make_job(h, clock, OWNER, "ok", name="pay rent", prompt="remind me to pay rent", delay_minutes=60)
    clock.advance(hours=26)  # beyond a one-off's grace of 24 h: skipped, the owner asked
    tg.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked by the user", chat_id=OWNER)
    parked = Parked()
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC", prepare=sleeping(parked)) as h:
        await parked.wait()  # the notice's first send was refused; its retry waits
        skipped = await h.app.storage.get_job(job.id)
        assert skipped is not None and skipped.state == "missed"
    assert not any(t.startswith(missed) for t in texts(tg, OWNER))
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        notice = await h.bot_text(OWNER, lambda t: t.startswith(missed))
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        assert h.app.scheduler is not None
        await tick(h.app.scheduler)
        fake_api.script(reply_text("Pay the rent today."))
        await press(h, notice, "▶ Run now")  # the notice still does its job
        await h.says(OWNER, "⏰ pay rent\n\nPay the rent today.")
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
    assert [t.startswith(missed) for t in texts(tg, OWNER)].count(True) == 1


async def test_a_job_answer_whose_send_lost_its_answer_shows_once_and_the_owner_is_told(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The live send's answer is lost in a new process (nothing known to look from): the
    answer may show, so it is not sent again; the owner learns it may be missing."""
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        job = await make_job(h, clock, OWNER, "ok", name="standup", prompt="post the standup note", delay_minutes=5)
    clock.advance(minutes=5)
    fake_api.script(reply_text("Standup: all good, nothing blocked today."))
    tg.drop_response_next("sendMessage", chat_id=OWNER)
    async with running_at(tmp_path, tg, fake_api, clock, prepare=sleeping(no_wait)) as h:
        await h.bot_text(OWNER, lambda t: t.startswith("⚠️ “standup” ran, but I cannot tell"))
        await h.app.conversations.lanes.drain()
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job.id)
    # It did arrive — whole, or as far as it had streamed when that send's answer was lost
    # (under load the first send can go out before the whole answer exists) — never twice.
    shown = [t for t in texts(tg, OWNER) if t.startswith("⏰ standup")]
    assert len(shown) == 1 and ANSWER.startswith(shown[0]), shown
    assert len(reports(tg)) == 1
    assert after is not None and after.last_delivery == "unknown"


async def test_a_resend_whose_answer_and_whose_check_are_lost_shows_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The live answer is refused; the re-send posts but its answer is lost; the check for it
    (the lost-send probe) loses its connection too: still exactly one message."""
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        def lose_the_resend_and_its_check() -> None:
            tg.drop_response_next("sendMessage", chat_id=GROUP)  # the first send not refused: the re-send
            tg.drop_response_next("editMessageText", chat_id=GROUP, apply=False)  # the probe for it

        job_id = await standup_fails_live(h, tg, clock, also=lose_the_resend_and_its_check)
        await h.app.conversations.lanes.drain()
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    assert texts(tg, GROUP).count(ANSWER) == 1 and reports(tg) == []
    assert after is not None and after.last_delivery == "delivered"


def test_what_a_resend_carries_is_only_what_the_chat_does_not_show() -> None:
    def part(index: int, shows: str | None, final: str, state: str = "failed", lost: bool = False) -> DeliveredPart:
        message_id = None if shows is None else str(index + 10)
        return DeliveredPart(index, message_id, shows or "", state, final, lost)  # type: ignore[arg-type]

    first, second = "⏰ standup\n\nPart one.", "Part two."
    assert judge([part(0, first, first, "done"), part(1, second, second, "done")]) == ("delivered", None)
    assert judge([part(0, first, first, "done"), part(1, None, second)]) == ("resend", [second])
    assert judge([part(0, "⏰ standup\n\nPart", first), part(1, None, second)]) == ("resend", ["…one.", second])
    assert judge([part(0, None, first), part(1, None, second)]) == ("resend", None)  # nothing shows: all of it
    assert judge([part(0, first, first, "done"), part(1, None, second, lost=True)]) == ("unknown", [])
    assert judge([part(0, None, first, lost=True), part(1, None, second)]) == ("unknown", [second])  # only that
    assert judge([part(0, first, first, "gone")]) == ("delivered", None)  # deleted by someone: not re-sent


async def test_a_resend_that_lost_its_answer_before_a_restart_is_not_sent_again_and_the_owner_is_told(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The re-send posts but its answer is lost; the app restarts before looking for it. The
    new process cannot look (it knows none of the chat's message ids), so it does not post
    the answer again: the owner is told it may be missing."""
    clock = FakeClock(T0)
    parked = Parked(after=1)  # the re-send's 10 s pass; the look that follows waits forever
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(parked)) as h:
        job_id = await standup_fails_live(
            h, tg, clock, also=lambda: tg.drop_response_next("sendMessage", chat_id=GROUP)
        )
        await parked.wait()
    assert texts(tg, GROUP).count(ANSWER) == 1  # it did arrive
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        await h.bot_text(OWNER, lambda t: t.startswith("⚠️ “standup” ran, but I cannot tell"))
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    assert texts(tg, GROUP).count(ANSWER) == 1 and len(reports(tg)) == 1
    assert after is not None and after.last_delivery == "unknown"


async def test_a_resend_cut_off_by_a_crash_while_its_request_was_in_flight_is_not_posted_again(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The re-send reaches Telegram (the chat shows it) but the process dies before any answer
    comes back, so nothing about the attempt was stored. The next process must treat it as
    one that may have arrived: not posted a second time, the owner told once."""
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        job_id = await standup_fails_live(
            h, tg, clock, also=lambda: tg.drop_response_next("sendMessage", how="stall", chat_id=GROUP)
        )
        await h.bot_text(GROUP, lambda t: t == ANSWER)  # posted; its answer never comes: stop now
    assert texts(tg, GROUP).count(ANSWER) == 1
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES, prepare=sleeping(no_wait)) as h:
        await h.bot_text(OWNER, lambda t: t.startswith("⚠️ “standup” ran, but I cannot tell"))
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
        after = await h.app.storage.get_job(job_id)
    assert texts(tg, GROUP).count(ANSWER) == 1, "the answer was posted twice"
    assert len(reports(tg)) == 1
    assert after is not None and after.last_delivery == "unknown"


async def test_a_missed_run_notice_whose_send_was_lost_before_a_restart_still_reaches_the_owner(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The notice's send loses its answer (here it never took effect) and the app restarts
    before looking for it. The new process cannot look; an answer would then be reported to
    the owner, but a notice *is* the owner's message: giving it up drops the run silently.
    It is sent again (a repeated notice beats a lost one)."""
    clock = FakeClock(T0)
    missed = "⏰ Missed “pay rent” at Mon 23 Nov 09:00"
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC") as h:
        await make_job(h, clock, OWNER, "ok", name="pay rent", prompt="remind me to pay rent", delay_minutes=60)
    clock.advance(hours=26)  # beyond a one-off's grace of 24 h: skipped, the owner asked
    tg.drop_response_next("sendMessage", chat_id=OWNER, apply=False)
    parked = Parked()
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC", prepare=sleeping(parked)) as h:
        await parked.wait()  # the look for the lost notice waits: stop the app now
    assert not any(t.startswith(missed) for t in texts(tg, OWNER))
    clock.advance(seconds=10)
    async with running_at(tmp_path, tg, fake_api, clock, timezone="UTC", prepare=sleeping(no_wait)) as h:
        await h.bot_text(OWNER, lambda t: t.startswith(missed))
        await h.app.conversations.jobs.drain()  # type: ignore[union-attr]
    assert [t.startswith(missed) for t in texts(tg, OWNER)].count(True) == 1
