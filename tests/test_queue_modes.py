"""Queue modes through the whole app (real lanes, inbox, loop, the SDK against the fake
Messages API): ten messages arrive while a run is busy; in every mode none is lost, the
order holds, and every inbox row ends `done`."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.commands import Command
from bot.queue_modes import BUSY_NOTICE, queue_command
from bot.router import Accept
from agent_core.risk import Scope
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_script import Reply, Text, ToolUse, last_user_text, user_blocks
from tests.fakes.recording_adapter import private
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, make_job, running_at, tick
from tests.telegram_harness import OWNER, tg  # noqa: F401  (fixture)

MAIN = "main"
ARRIVING = [f"message {i}" for i in range(1, 11)]


class HeldFirstCall:
    """Responder: the first model call waits until `release` (so the run is busy while
    messages arrive); every later call answers `answer to <last user text>`."""

    def __init__(self, first: Reply | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._first = first
        self._calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self._calls += 1
            first = self._calls == 1
        if first:
            self.entered.set()
            self.release.wait(15)
            if self._first is not None:
                return self._first
        return Reply(Text(f"answer to {last_user_text(body)}"))


def user_texts(transcript: list[dict[str, Any]]) -> list[str]:
    """Every user text block in the stored conversation, in order (steered ones included)."""
    return [
        b["text"]
        for m in transcript
        if m["role"] == "user"
        for b in m["content"]
        if b.get("type") == "text"
    ]


async def busy_then_ten(app, adapter, responder: HeldFirstCall) -> None:
    await adapter.say(private(OWNER_ID, "message 0"))
    assert await asyncio.to_thread(responder.entered.wait, 10), "the first run never called the model"
    for text in ARRIVING:
        assert await app.conversations.receive(private(OWNER_ID, text))
    responder.release.set()
    async with asyncio.timeout(30):
        await app.conversations.lanes.drain()


async def assert_nothing_lost(app) -> list[str]:
    texts = user_texts(await app.storage.load_transcript(MAIN))
    assert texts == ["message 0", *ARRIVING], texts
    rows = await app.storage.inbox_rows()
    assert rows and {r.state for r in rows} == {"done"}, [(r.message.text, r.state) for r in rows]
    return texts


async def test_collect_mode_ten_messages_during_a_run_go_to_the_next_run_in_order(tmp_path, fake_api) -> None:
    fake_api.responder = responder = HeldFirstCall()
    async with running_app(tmp_path, fake_api, agent={"queue_mode": "collect"}) as (app, adapter):
        await busy_then_ten(app, adapter, responder)
        await assert_nothing_lost(app)
        assert len(fake_api.requests) == 2  # one run for message 0, one for the ten
        assert [r.outcome.text for r in adapter.closed_replies()][-1] == "answer to message 10"


async def test_followup_mode_ten_messages_during_a_run_get_one_run_each_in_order(tmp_path, fake_api) -> None:
    fake_api.responder = responder = HeldFirstCall()
    async with running_app(tmp_path, fake_api, agent={"queue_mode": "followup"}) as (app, adapter):
        await busy_then_ten(app, adapter, responder)
        await assert_nothing_lost(app)
        answers = [r.outcome.text for r in adapter.closed_replies()]
        assert answers == ["answer to message 0", *[f"answer to {t}" for t in ARRIVING]]


async def test_steer_mode_ten_messages_join_the_running_run_at_its_next_tool_boundary(tmp_path, fake_api) -> None:
    fake_api.responder = responder = HeldFirstCall(Reply(ToolUse("read_file", {"path": "SOUL.md"})))
    async with running_app(tmp_path, fake_api, agent={"queue_mode": "steer"}) as (app, adapter):
        await busy_then_ten(app, adapter, responder)
        await assert_nothing_lost(app)
        # One run: the request after the tool carries its result, then the ten, in order.
        assert len(fake_api.requests) == 2
        last = user_blocks(fake_api.requests[-1].json)
        assert last[0]["type"] == "tool_result"
        assert [b["text"] for b in last[1:]] == ARRIVING
        replies = adapter.closed_replies()
        assert len(replies) == 1 and replies[0].outcome.text.endswith("answer to message 10")
        assert [n for _, n in adapter.notices if "Got it" in n] == [BUSY_NOTICE["steer"]]  # told once
        # The steered rows belong to the run that received them.
        rows = await app.storage.inbox_rows()
        assert len({r.run_id for r in rows}) == 1


async def test_interrupt_mode_stops_the_run_and_the_new_messages_start_one_nothing_lost(tmp_path, fake_api) -> None:
    fake_api.responder = responder = HeldFirstCall()
    async with running_app(tmp_path, fake_api, agent={"queue_mode": "interrupt"}) as (app, adapter):
        await busy_then_ten(app, adapter, responder)
        await assert_nothing_lost(app)
        first = await app.storage.get_run((await app.storage.inbox_rows())[0].run_id)
        assert first is not None and first.status == "cancelled"
        assert not [n for _, n in adapter.notices if "Got it" in n]  # the stopped answer says it
        assert adapter.closed_replies()[-1].outcome.text == "answer to message 10"


@pytest.mark.parametrize("mode", ["followup", "steer", "interrupt", "collect"])
async def test_queue_command_sets_the_mode_for_this_session_and_it_survives_a_restart(tmp_path, fake_api, mode) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        route = Accept(MAIN, Scope.MAIN, True)
        answer = await queue_command(app.conversations, Command("queue", mode), private(OWNER_ID, f"/queue {mode}"), route)
        assert answer.startswith(f"Queue mode: {mode}")
        assert app.conversations.lanes.mode_of(MAIN) == mode
        assert app.conversations.lanes.mode_of("dm:telegram:9") == "collect"  # other sessions keep theirs
    async with running_app(tmp_path, fake_api) as (app, adapter):
        assert app.conversations.lanes.mode_of(MAIN) == mode


async def test_queue_command_refuses_an_unknown_mode(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "/queue sometimes"))
        await adapter.wait_for(lambda: any("Unknown mode" in n for _, n in adapter.notices))
        assert app.conversations.lanes.mode_of(MAIN) == "collect"


JOB_T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


async def test_interrupt_mode_never_cancels_a_scheduled_jobs_run_the_message_is_answered_after_it(
    tmp_path, tg: FakeTelegram, fake_api
) -> None:
    clock = FakeClock(JOB_T0)
    async with running_at(tmp_path, tg, fake_api, clock, agent={"queue_mode": "interrupt"}) as h:
        assert h.app.scheduler is not None
        job = await make_job(h, clock, OWNER, "ok", name="report", prompt="Write the report", delay_minutes=5)
        fake_api.responder = responder = HeldFirstCall()  # the job's model call waits
        clock.advance(minutes=5)
        await tick(h.app.scheduler)
        assert await asyncio.to_thread(responder.entered.wait, 10), "the job's run never called the model"
        tg.send_private(OWNER, "are you there?")
        await tg.await_for(lambda: h.app.conversations.lanes.queued(MAIN) == 1)  # arrived during the job's run
        responder.release.set()
        reported = await h.bot_text(OWNER, lambda t: t.startswith("⏰ report\n\nanswer to [Scheduled job"))
        answered = await h.says(OWNER, "answer to are you there?")
        await h.app.conversations.lanes.drain()
        ran = await h.app.storage.get_job(job.id)
    assert reported.message_id < answered.message_id  # the job's answer first, then the user's
    assert ran is not None and (ran.last_exec, ran.last_delivery) == ("ok", "delivered")
    assert not any("stopped" in (m.text or "").lower() for m in tg.bot_messages(OWNER))


async def test_interrupt_mode_a_job_falling_due_never_stops_the_users_answer(
    tmp_path, tg: FakeTelegram, fake_api
) -> None:
    """Interrupt is for the user's new message; a job that falls due waits like one in collect."""
    clock = FakeClock(JOB_T0)
    async with running_at(tmp_path, tg, fake_api, clock, agent={"queue_mode": "interrupt"}) as h:
        assert h.app.scheduler is not None
        job = await make_job(h, clock, OWNER, "ok", name="report", prompt="Write the report", delay_minutes=5)
        fake_api.responder = responder = HeldFirstCall()  # the user's model call waits
        tg.send_private(OWNER, "plan my week")
        assert await asyncio.to_thread(responder.entered.wait, 10), "the user's run never called the model"
        clock.advance(minutes=5)
        await tick(h.app.scheduler)
        assert h.app.conversations.lanes.queued(MAIN) == 1  # the job's run waits behind the answer
        responder.release.set()
        answered = await h.says(OWNER, "answer to plan my week")
        reported = await h.bot_text(OWNER, lambda t: t.startswith("⏰ report\n\nanswer to [Scheduled job"))
        await h.app.conversations.lanes.drain()
        ran = await h.app.storage.get_job(job.id)
    assert answered.message_id < reported.message_id
    assert ran is not None and (ran.last_exec, ran.last_delivery) == ("ok", "delivered")
    assert not any("stopped" in (m.text or "").lower() for m in tg.bot_messages(OWNER))
