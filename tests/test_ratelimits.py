"""Rate limits and the daily token budget: the limiter on a real database (SQLite and
PostgreSQL) with an injected clock, and the replies through the real app over the wire."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import pytest

from agent_core.events import Usage
from agent_core.inbound import Inbound
from bot.limit_settings import LimitSettings, ScopeLimits
from bot.ratelimits import RateLimiter
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, OWNER, STRANGER, running, tg  # noqa: F401

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

pytest_plugins = ["tests.storage_fixtures"]

OFF = ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=0)


def dm(user: str = "42") -> Inbound:
    return Inbound("telegram", "private", user, user, "Sam", "hi")


def in_group(user: str = "42", chat: str = "-100500") -> Inbound:
    return Inbound("telegram", "group", chat, user, "Sam", "@roost hi", mentioned=True)


class Limits:
    """A hot-reloadable [limits]: the limiter reads `current` on every check."""

    def __init__(self, settings: LimitSettings) -> None:
        self.current = settings

    def __call__(self) -> LimitSettings:
        return self.current


@pytest.fixture
def limiter_for(storage: Storage, clock: FakeClock):  # noqa: ANN201
    def make(settings: LimitSettings, *, shared: bool = False) -> tuple[RateLimiter, Limits]:
        """`shared`: message windows in the database, as replicas on PostgreSQL keep them."""
        limits = Limits(settings)
        return RateLimiter(storage, storage, limits, clock=clock, tz=UTC, windows=storage if shared else None), limits

    return make


@pytest.mark.parametrize("shared", [False, True], ids=["in-memory", "in-database"])
async def test_messages_per_minute_refuses_with_the_time_and_tells_once_per_window(
    limiter_for, storage: Storage, clock: FakeClock, shared: bool
) -> None:
    settings = LimitSettings(user=ScopeLimits(messages_per_minute=3, runs_per_hour=0, daily_tokens=0))
    limiter, _ = limiter_for(settings, shared=shared)
    key = "dm:telegram:42"
    for _ in range(3):
        assert await limiter.check(dm(), key, is_owner=False) is None
        clock.advance(timedelta(seconds=10))  # 12:00:00, :10, :20
    first = await limiter.check(dm(), key, is_owner=False)
    assert first is not None and first.limit == "messages_per_minute"
    assert first.notice == "You've reached the limit of 3 messages per minute; try again at 12:01."
    clock.advance(timedelta(seconds=5))
    again = await limiter.check(dm(), key, is_owner=False)
    assert again is not None and again.notice is None  # told once, not on every message
    assert await limiter.check(dm("43"), "dm:telegram:43", is_owner=False) is None  # others unaffected
    clock.now = datetime(2026, 1, 1, 12, 1, 0, 1, tzinfo=UTC)  # the first message left the window
    assert await limiter.check(dm(), key, is_owner=False) is None
    rows = await storage.audit_entries(limit=None)
    assert [(r.kind, r.actor, r.decision) for r in rows] == [("rate_limit", "telegram:42", "limited")]


async def test_runs_per_hour_counts_the_runs_table_across_restarts(
    limiter_for, storage: Storage, clock: FakeClock
) -> None:
    key = "dm:telegram:42"
    for i in range(2):
        await storage.start_run(f"r{i}", key, "m", requester="telegram:42")
        clock.advance(timedelta(minutes=20))  # runs at 12:00 and 12:20; now 12:40
    await storage.start_run("other", "dm:telegram:4", "m", requester="telegram:4")  # another user's run does not count
    limiter, _ = limiter_for(LimitSettings(user=ScopeLimits(messages_per_minute=0, runs_per_hour=2, daily_tokens=0)))
    limited = await limiter.check(dm(), key, is_owner=False)
    assert limited is not None and limited.notice == "You've reached the limit of 2 answers per hour; try again at 13:00."
    clock.now = datetime(2026, 1, 1, 13, 0, 1, tzinfo=UTC)
    assert await limiter.check(dm(), key, is_owner=False) is None


async def test_daily_token_budget_is_a_spend_cap_until_local_midnight(
    limiter_for, storage: Storage, clock: FakeClock
) -> None:
    key = "dm:telegram:42"
    await storage.start_run("r1", key, "m", requester="telegram:42")
    await storage.finish_run("r1", "finished", "end_turn", 1, Usage(700, 200, 50_000, 50_000))
    limiter, limits = limiter_for(LimitSettings(user=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)))
    assert await limiter.check(dm(), key, is_owner=False) is None  # 900 of 1000 (cache tokens are not spend)
    await storage.start_run("r2", key, "m", requester="telegram:42")
    await storage.finish_run("r2", "finished", "end_turn", 1, Usage(90, 10, 0, 0))
    limited = await limiter.check(dm(), key, is_owner=False)
    assert limited is not None and limited.notice == "You've used today's budget of 1,000 tokens; try again at midnight."
    limits.current = LimitSettings(user=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=5000))
    assert await limiter.check(dm(), key, is_owner=False) is None  # a reloaded budget applies at once
    limits.current = LimitSettings(user=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000))
    clock.now = datetime(2026, 1, 2, 0, 0, 1, tzinfo=UTC)  # a new local day
    assert await limiter.check(dm(), key, is_owner=False) is None


async def test_a_groups_topics_share_one_budget_and_a_similar_id_is_another_group(
    limiter_for, storage: Storage
) -> None:
    await storage.start_run("t1", "group:telegram:-100500:7", "m")
    await storage.finish_run("t1", "finished", "end_turn", 1, Usage(600, 0, 0, 0))
    await storage.start_run("g1", "group:telegram:-100500", "m")
    await storage.finish_run("g1", "finished", "end_turn", 1, Usage(500, 0, 0, 0))
    await storage.start_run("x", "group:telegram:-1005001", "m")  # a different group
    await storage.finish_run("x", "finished", "end_turn", 1, Usage(9_999, 0, 0, 0))
    limiter, _ = limiter_for(LimitSettings(user=OFF, group=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)))
    limited = await limiter.check(in_group(), "group:telegram:-100500", is_owner=False)
    assert limited is not None and limited.bucket == "group:telegram:-100500"
    assert limited.notice == "This group has used today's budget of 1,000 tokens; try again at midnight."
    other = in_group(chat="-100_%")  # LIKE wildcards in an id match nothing else
    assert await limiter.check(other, "group:telegram:-100_%", is_owner=False) is None


async def test_the_owner_is_exempt_unless_configured_otherwise(limiter_for, clock: FakeClock) -> None:
    tight = ScopeLimits(messages_per_minute=1, runs_per_hour=0, daily_tokens=0)
    limiter, limits = limiter_for(LimitSettings(user=tight, group=tight))
    for _ in range(5):
        assert await limiter.check(in_group("1"), "group:telegram:-100500", is_owner=True) is None
    limits.current = LimitSettings(owner_exempt=False, user=tight, group=tight)
    assert await limiter.check(dm("1"), "main", is_owner=True) is None
    limited = await limiter.check(dm("1"), "main", is_owner=True)
    assert limited is not None and limited.limit == "messages_per_minute"


async def test_usage_at_nine_is_still_refused_at_three_and_until_local_midnight_not_for_24_hours(
    storage: Storage, clock: FakeClock
) -> None:
    """The daily budget is a day of ROOST_TIMEZONE, midnight to midnight: a copy of the hourly
    window (usage forgotten an hour later), a UTC day or a rolling 24 hours would each fail
    one of these checks."""
    new_york = ZoneInfo("America/New_York")
    clock.now = datetime(2026, 3, 2, 9, 0, tzinfo=new_york).astimezone(UTC)  # 09:00 local, 14:00 UTC
    await storage.start_run("r1", "dm:telegram:42", "m", requester="telegram:42")
    await storage.finish_run("r1", "finished", "end_turn", 1, Usage(900, 100, 0, 0))
    limits = Limits(LimitSettings(user=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)))
    limiter = RateLimiter(storage, storage, limits, clock=clock, tz=new_york)

    def at(hour: int, minute: int = 0, day: int = 2) -> datetime:
        return datetime(2026, 3, day, hour, minute, tzinfo=new_york).astimezone(UTC)

    clock.now = at(15)  # six hours later: an hourly window would have forgotten the 09:00 run
    limited = await limiter.check(dm(), "dm:telegram:42", is_owner=False)
    assert limited is not None and limited.notice == "You've used today's budget of 1,000 tokens; try again at midnight."
    assert limited.retry_at == at(0, day=3)
    clock.now = at(23, 30)  # 04:30 UTC the next day: a UTC day would have started afresh
    assert await limiter.check(dm(), "dm:telegram:42", is_owner=False) is not None
    clock.now = at(0, 1, day=3)  # past local midnight, only 15 hours after the run: a new day
    assert await limiter.check(dm(), "dm:telegram:42", is_owner=False) is None


async def test_a_run_still_spending_after_local_midnight_meets_the_new_days_budget(
    limiter_for, storage: Storage, clock: FakeClock
) -> None:
    """A run admitted at 23:50 goes on calling the model after midnight. A day counted by
    start times alone charged all of it to yesterday, so between its turns the new day's
    budget saw nothing and it spent on unchecked (and its spend was nobody's today). A run
    that ended before midnight stays yesterday's."""
    clock.now = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
    await storage.start_run("r0", "dm:telegram:42", "m", requester="telegram:42")
    clock.now = datetime(2026, 3, 2, 23, 0, tzinfo=UTC)
    await storage.finish_run("r0", "finished", "end_turn", 1, Usage(4000, 1000, 0, 0))
    clock.now = datetime(2026, 3, 2, 23, 50, tzinfo=UTC)
    await storage.start_run("r1", "dm:telegram:42", "m", requester="telegram:42")
    one_k = ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)
    limiter, _ = limiter_for(LimitSettings(user=one_k, group=OFF))
    clock.now = datetime(2026, 3, 3, 0, 5, tzinfo=UTC)
    assert await limiter.spent("telegram:42", "dm:telegram:42", is_owner=False) is None  # r0 was yesterday's
    clock.now = datetime(2026, 3, 3, 0, 10, tzinfo=UTC)
    await storage.note_usage("r1", 5, Usage(4000, 1000, 0, 0))  # its turns after midnight
    stopped = await limiter.spent("telegram:42", "dm:telegram:42", is_owner=False)
    assert stopped is not None and "today's budget of 1,000 tokens" in stopped, "the run spent past midnight unchecked"
    await storage.finish_run("r1", "finished", "end_turn", 6, Usage(4000, 1000, 0, 0))
    assert await limiter.check(dm(), "dm:telegram:42", is_owner=False) is not None


async def test_an_owners_job_in_a_group_stops_between_turns_at_the_groups_budget(
    storage: Storage, clock: FakeClock
) -> None:
    from agent_core.loop import RunRequest
    from agent_core.risk import Scope
    from bot.ratelimits import RunBudget

    key, owner = "group:telegram:-100500:job-abc", "telegram:1"
    await storage.start_run("j1", key, "m", requester=owner)
    group_1k = ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)
    limiter = RateLimiter(storage, storage, Limits(LimitSettings(user=OFF, group=group_1k)), clock=clock, tz=UTC)
    await storage.note_usage("j1", 3, Usage(2000, 0, 0, 0))
    # At admission the group's budget holds for the owner's job ...
    assert await limiter.check(in_group("1"), key, is_owner=True, scheduled=True) is not None
    # ... and between the turns of one already running it must too.
    budget = RunBudget(limiter, storage, lambda identity: identity == owner)
    request = RunRequest(session_key=key, scope=Scope.SUB, content=[], requester=owner, run_id="j1", scheduled=True)
    assert await budget(request, 3, Usage(2000, 0, 0, 0)) is not None
    # The owner's own message in the group (not a job) stays exempt, as at admission.
    assert await budget(dataclasses.replace(request, scheduled=False), 3, Usage(2000, 0, 0, 0)) is None


async def test_isolated_jobs_count_against_their_chat_and_the_user_who_made_them(
    limiter_for, storage: Storage
) -> None:
    """Not a fresh budget per job: a DM job's spend is its maker's; a group job's is the
    group's too (and a worker's is its parent chat's)."""
    await storage.start_run("j1", "dm:telegram:42:job-abc", "m", requester="telegram:42")
    await storage.finish_run("j1", "finished", "end_turn", 1, Usage(600, 0, 0, 0))
    await storage.start_run("j2", "group:telegram:-100500:job-xyz", "m", requester="telegram:42")
    await storage.finish_run("j2", "finished", "end_turn", 1, Usage(600, 0, 0, 0))
    await storage.start_run("w1", "worker:w1", "m", account="group:telegram:-100500:7", requester="telegram:9")
    await storage.finish_run("w1", "finished", "end_turn", 1, Usage(500, 0, 0, 0))
    one_k = ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1000)
    limiter, _ = limiter_for(LimitSettings(user=one_k, group=OFF))
    refused = await limiter.check(dm(), "dm:telegram:42", is_owner=False)
    assert refused is not None and refused.bucket == "telegram:42"  # 1,200 across their DM job and group job
    assert await limiter.check(dm("9"), "dm:telegram:9", is_owner=False) is None  # 500 of 1,000
    limiter, _ = limiter_for(LimitSettings(user=OFF, group=ScopeLimits(messages_per_minute=0, runs_per_hour=0, daily_tokens=1100)))
    refused = await limiter.check(in_group("9"), "group:telegram:-100500", is_owner=False)
    assert refused is not None and refused.bucket == "group:telegram:-100500"  # 600 (job) + 500 (worker)


# --- through the real app ----------------------------------------------------------------


async def test_a_flooding_group_member_is_told_once_and_the_owner_still_gets_answers(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    limits = {"group": {"messages_per_minute": 2, "runs_per_hour": 0, "daily_tokens": 0}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits) as h:
        for i in range(2):
            tg.send_group(GROUP, MEMBER, f"q{i}", mention=True, first_name="Bob")
            await h.bot_text(GROUP, lambda t, i=i: t.endswith(f"q{i}\n</untrusted>"))
        tg.send_group(GROUP, MEMBER, "q2", mention=True, first_name="Bob")
        notice = await h.bot_text(GROUP, lambda t: "limit" in t)
        assert (notice.text or "").startswith("This group has reached the limit of 2 messages per minute; try again at ")
        tg.send_group(GROUP, MEMBER, "q3", mention=True, first_name="Bob")
        tg.send_group(GROUP, OWNER, "owner here", mention=True, first_name="Olivia")
        await h.bot_text(GROUP, lambda t: t.endswith("owner here\n</untrusted>"))
        texts = [m.text or "" for m in tg.bot_messages(GROUP)]
        assert sum("limit" in t for t in texts) == 1  # told once, not for q3
        assert not any(t.endswith(("q2\n</untrusted>", "q3\n</untrusted>")) for t in texts)
        assert len(fake_api.requests) == 3


async def test_a_paired_user_over_the_daily_budget_gets_the_spend_cap_reply(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Here you go.", usage={"input_tokens": 900, "output_tokens": 200}))
    limits = {"user": {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 1000}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits) as h:
        await h.app.storage.pair_user("telegram", str(STRANGER), "Sam")
        tg.send_private(STRANGER, "summarise the news", first_name="Sam")
        await h.says(STRANGER, "Here you go.")
        await h.app.conversations.lanes.drain()  # the run's usage is stored when it finishes
        tg.send_private(STRANGER, "and more", first_name="Sam")
        await h.says(STRANGER, "You've used today's budget of 1,000 tokens; try again at midnight.")
        tg.send_private(OWNER, "owner is exempt")
        await h.says(OWNER, "echo: owner is exempt")
        assert len(fake_api.requests) == 2
        rows = await h.app.storage.audit_entries(limit=None)
    assert any(r.kind == "rate_limit" and r.actor == f"telegram:{STRANGER}" for r in rows)
