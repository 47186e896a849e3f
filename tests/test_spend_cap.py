"""The spend cap holds (issue 16, "every budget hard"), through the real app over the wire:
python-telegram-bot against the fake Bot API, the anthropic SDK against the fake Messages API
with exact usage on every answer.

Invariant: whatever spends tokens for a chat — its runs, their later turns, the workers they
spawn, compaction's calls — counts against that chat's budget and the budget of the person
who asked, in every chat; once a budget is reached, no run starts and a running one makes at
most one more model call (per run going at once) and then ends, saying so. The owner is
exempt."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import text

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, OWNER, STRANGER, Harness, running, tg  # noqa: F401
from tests.test_workers import spawn, worker_turn

OFF = {"messages_per_minute": 0, "runs_per_hour": 0}


def usage(tokens: int) -> dict[str, int]:
    """Exactly `tokens` of spend (3/4 input, 1/4 output), no cache."""
    return {
        "input_tokens": tokens * 3 // 4, "output_tokens": tokens - tokens * 3 // 4,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
    }  # fmt: skip


def charged(fake_api: FakeAnthropic) -> int:
    """What the service charged: input + output of every answer it served."""
    return sum(
        r.served.usage["input_tokens"] + r.served.usage["output_tokens"]
        for r in fake_api.requests
        if isinstance(r.served, Reply) and r.served.usage
    )


async def stored_tokens(h: Harness, where: str = "1 = 1") -> int:
    async with h.app.storage.engine.connect() as conn:
        value = await conn.scalar(text(f"SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM runs WHERE {where}"))
    return int(value or 0)


def looping_tools(turns: int, tokens: int) -> list[Any]:
    """`turns` answers that each ask for one more tool call (different inputs, so no loop
    detection), each costing `tokens`."""
    return [reply_tools(ToolUse("read_file", {"path": f"notes-{n}.md"}), usage=usage(tokens)) for n in range(turns)]


async def test_a_run_with_many_tool_turns_stops_at_the_turn_after_crossing_the_budget(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    limits = {"user": {**OFF, "daily_tokens": 1000}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits, agent={"max_turns": 10}) as h:
        # The owner's exemption stays: a many-turn run past the budget goes to its end.
        fake_api.script(*looping_tools(6, 300), reply_text("All read.", usage=usage(300)))
        tg.send_private(OWNER, "read all the notes")
        await h.bot_text(OWNER, lambda t: "All read." in t)
        await h.app.conversations.lanes.drain()
        owners = len(fake_api.requests)

        # 300 tokens a turn, budget 1,000: turn 4 crosses (1,200); the run ends before turn 5.
        fake_api.script(*looping_tools(8, 300), reply_text("never reached"))
        await h.app.storage.pair_user("telegram", str(STRANGER), "Sam")
        tg.send_private(STRANGER, "read all the notes", first_name="Sam")
        stopped = await h.bot_text(STRANGER, lambda t: "Stopped: you've used today's budget of 1,000 tokens" in t)
        assert "try again at" in (stopped.text or "")
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) - owners == 4, "the run went on past the turn that crossed the budget"
        spent = await stored_tokens(h, f"requester = 'telegram:{STRANGER}'")
        assert spent == 1200 <= 1000 + 300  # N + one turn at most
        assert await stored_tokens(h) == charged(fake_api)  # every call the service charged is counted
        assert not any("never reached" in (m.text or "") for m in tg.bot_messages(STRANGER))


async def test_a_run_paused_by_the_service_again_and_again_stops_at_the_turn_after_crossing_the_budget(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A paused turn (`pause_turn`, a long server-tool turn) is continued with another model
    call: that call meets the budget like any other. 600 tokens a turn, budget 1,000: the
    second turn crosses it, no third is made (unchecked, the run went on for all five)."""
    limits = {"user": {**OFF, "daily_tokens": 1000}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits) as h:
        paused = [Reply(Text(f"Still searching ({n})."), stop_reason="pause_turn", usage=usage(600)) for n in range(4)]
        fake_api.script(*paused, reply_text("never reached", usage=usage(600)))
        await h.app.storage.pair_user("telegram", str(STRANGER), "Sam")
        tg.send_private(STRANGER, "search the web for it", first_name="Sam")
        await h.bot_text(STRANGER, lambda t: "today's budget of 1,000 tokens" in t or "never reached" in t)
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2, "the paused run went on past the turn that crossed the budget"
        assert await stored_tokens(h, f"requester = 'telegram:{STRANGER}'") == 1200 <= 1000 + 600


async def test_workers_spend_counts_against_the_group_and_a_worker_cannot_exceed_its_budget(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The reproduction: a group with a 1,000-token daily budget spent 40,000 through spawn,
    because workers ran as `worker:<id>` sessions whose tokens counted against nobody."""
    for n in range(1, 7):  # the worker would take all of its 6 turns, 400 tokens each
        fake_api.script_when(
            worker_turn("dig deep", n),
            reply_tools(ToolUse("read_file", {"path": f"dig-{n}.md"}), usage=usage(400)),
        )
    fake_api.script(
        reply_tools(spawn("digger", "dig deep"), usage=usage(100)),
        reply_text("never reached", usage=usage(100)),
    )
    limits = {"user": OFF | {"daily_tokens": 0}, "group": {**OFF, "daily_tokens": 1000}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits) as h:
        tg.send_group(GROUP, MEMBER, "dig as deep as you can", mention=True, first_name="Bob")
        # The parent ends after the worker's result, saying why, without another model call.
        await h.bot_text(GROUP, lambda t: "(Stopped: this group has used today's budget of 1,000 tokens" in t)
        await h.app.conversations.lanes.drain()
        # 100 (parent) + 3 × 400: the worker's third turn crossed 1,000; it made no fourth call.
        worker_calls = [r for r in fake_api.requests if "Task: dig deep" in r.body.decode()]
        assert len(worker_calls) == 3 and len(fake_api.requests) == 4
        (worker,) = await h.app.storage.worker_runs()
        assert worker.status == "budget_exceeded"
        assert "this group has used today's budget of 1,000 tokens" in (worker.result or "")
        # The worker's tokens are on the group's budget: the group's next message is refused.
        tg.send_group(GROUP, MEMBER, "and again", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("This group has used today's budget of 1,000 tokens"))
        assert len(fake_api.requests) == 4  # nothing was asked for the refused message
        group_key = f"group:telegram:{GROUP}"
        assert await stored_tokens(h, f"account = '{group_key}'") == 1300 == charged(fake_api) <= 1000 + 400
        # ... and on the person who asked.
        assert await stored_tokens(h, f"requester = 'telegram:{MEMBER}'") == 1300


async def test_a_users_budget_counts_their_group_runs_in_their_dm(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Here is the group answer.", usage=usage(1200)))
    limits = {"user": {**OFF, "daily_tokens": 1000}, "group": {**OFF, "daily_tokens": 0}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits, timezone="America/New_York") as h:
        assert h.app.conversations.limiter is not None
        assert h.app.conversations.limiter.zone == ZoneInfo("America/New_York")  # a day is ROOST_TIMEZONE's
        await h.app.storage.pair_user("telegram", str(MEMBER), "Bob")
        tg.send_group(GROUP, MEMBER, "summarise the thread", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("Here is the group answer."))
        await h.app.conversations.lanes.drain()
        tg.send_private(MEMBER, "now privately", first_name="Bob")
        await h.says(MEMBER, "You've used today's budget of 1,000 tokens; try again at midnight.")
        # Another member of the same group is not limited by Bob's spend.
        fake_api.script(reply_text("Hi Sam."))
        tg.send_group(GROUP, STRANGER, "hello", mention=True, first_name="Sam")
        await h.bot_text(GROUP, lambda t: t.startswith("Hi Sam."))
        assert len(fake_api.requests) == 2


async def test_a_members_isolated_group_job_counts_against_the_group_and_the_member(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Not a fresh budget per job: the job's spend is its chat's and its maker's."""
    from datetime import UTC, datetime

    from tests.scheduler_support import FakeClock, running_at, tick

    clock = FakeClock(datetime(2026, 11, 23, 8, 0, tzinfo=UTC))
    limits = {"user": {**OFF, "daily_tokens": 1000}, "group": {**OFF, "daily_tokens": 1000}}
    policy = {"groups": {f"telegram:{GROUP}": {"write": "allow"}}}  # members may schedule here
    async with running_at(tmp_path, tg, fake_api, clock, limits=limits, policy=policy) as h:
        await h.app.storage.pair_user("telegram", str(MEMBER), "Bob")
        fake_api.script(
            reply_tools(ToolUse("schedule", {"action": "create", "name": "digest", "prompt": "Post the digest",
                                             "delay_minutes": 5, "isolated": True}), usage=usage(100)),
            reply_text("Scheduled.", usage=usage(100)),
        )
        tg.send_group(GROUP, MEMBER, "schedule the digest", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("Scheduled."))
        fake_api.script(reply_text("Digest: a long one.", usage=usage(1000)))
        clock.advance(minutes=5)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.bot_text(GROUP, lambda t: t.endswith("Digest: a long one."))
        await h.app.conversations.lanes.drain()
        tg.send_group(GROUP, STRANGER, "hello", mention=True, first_name="Sam")
        await h.bot_text(GROUP, lambda t: t.startswith("This group has used today's budget of 1,000 tokens"))
        tg.send_private(MEMBER, "hi", first_name="Bob")
        await h.says(MEMBER, "You've used today's budget of 1,000 tokens; try again at midnight.")
        assert len(fake_api.requests) == 3
