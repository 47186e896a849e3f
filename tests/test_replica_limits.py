"""Shared limits across replicas on one PostgreSQL: three full apps (each its own engine,
webhook server, lanes and breakers; they share the database and the workspace), messages
posted round-robin to their webhooks as a load balancer would. What a user meets must not
depend on how many replicas serve them: the flood guard admits its limit, not three times
it; the daily budget is overspent by at most one turn; a model one replica found down is
skipped by the others at once, and only one replica probes it when the cooldown is over.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from agent_core.breaker import Breakers
from agent_core.inbound import Inbound
from bot.limit_settings import LimitSettings, ScopeLimits
from bot.ratelimits import RateLimiter
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Error, Reply, Stall, Text, reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database
from tests.replica_support import inbox_states, until, webhook_replicas
from tests.telegram_harness import BOT_USERNAME, STRANGER, Harness, tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

REPLICAS = 3
GROUP = -1_000_777
MEMBER = 5077
PRIMARY, BACKUP = "claude-test", "claude-backup"


def group_update(update_id: int, text: str) -> dict[str, Any]:
    mention = f"@{BOT_USERNAME}"
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": int(time.time()),
        "chat": {"id": GROUP, "type": "group", "title": "Team"},
        "from": {"id": MEMBER, "is_bot": False, "first_name": "Bob"},
        "text": f"{mention} {text}", "entities": [{"type": "mention", "offset": 0, "length": len(mention)}],
    }}  # fmt: skip


def dm_update(update_id: int, text: str) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": int(time.time()), "text": text,
        "chat": {"id": STRANGER, "type": "private", "first_name": "Sam"},
        "from": {"id": STRANGER, "is_bot": False, "first_name": "Sam"},
    }}  # fmt: skip


async def inbox_settled(url: str, stored: int, timeout: float = 60) -> None:
    """Wait until `stored` updates are stored and none is waiting to be routed or run."""
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))

    async def settled() -> bool:
        seen = await conn.fetchval("SELECT count(*) FROM seen_updates")
        busy = await conn.fetchval("SELECT count(*) FROM inbox WHERE state IN ('received', 'queued', 'running')")
        return seen >= stored and busy == 0

    try:
        await until(settled, timeout, f"{stored} updates stored and the inbox settled")
    finally:
        await conn.close()


async def test_messages_per_minute_across_three_replicas_admits_the_limit_not_three_times_it(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A member floods a group with 9 messages, round-robin over three replicas, within a
    minute: 3 are answered and they are told once; per-process windows would answer 9."""
    tg.add_chat(GROUP, type="group", title="Team")
    fake_api.responder = lambda body: reply_text("answered")
    limits = {"user": {"messages_per_minute": 3, "runs_per_hour": 0, "daily_tokens": 0},
              "group": {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 0}}
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, REPLICAS, limits=limits) as started:
        hooks = [hook for _, hook in started]
        for n in range(9):
            assert await tg.apost_to_webhook(group_update(20_000 + n, f"q{n}"), url=hooks[n % REPLICAS]) == 200
            await inbox_settled(url, n + 1)  # one after another, as Telegram sends a chat's updates
        for h, _ in started:
            await h.app.conversations.lanes.drain()
        texts = [m.text or "" for m in tg.bot_messages(GROUP)]
        assert sum(t == "answered" for t in texts) == 3, texts
        notices = [t for t in texts if "limit of 3 messages per minute" in t]
        assert len(notices) == 1, texts  # told once per window, by whichever replica refused first
        assert len(fake_api.requests) == 3


async def test_daily_budget_across_three_replicas_is_exceeded_by_at_most_one_turn(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A user's daily budget of N tokens, with their messages landing round-robin on three
    replicas, is overspent by at most one turn: the input + output tokens of one model call
    (one response of at most max_tokens; with failover, the call's retries and its one
    continuation of an answer cut at max_tokens count as that turn) — per run going at once,
    a run and each of its workers counting as runs. One chat runs one run at a time, so here
    that is one turn. Each run is checked before every model call, its first included: a
    message admitted while another run was still spending (on any replica) is stopped
    before it calls the model if that run crossed the budget meanwhile."""
    turn = {"input_tokens": 900, "output_tokens": 100}  # 1,000 tokens a turn
    budget = 1500
    first, second = threading.Event(), threading.Event()
    fake_api.script(
        Reply(Stall(60, until=first), Text("answer one"), usage=turn),
        Reply(Stall(60, until=second), Text("answer two"), usage=turn),
    )
    fake_api.responder = lambda body: reply_text("answer three", usage=turn)
    tg.add_chat(STRANGER, type="private", first_name="Sam")
    limits = {"user": {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": budget}}
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, REPLICAS, limits=limits) as started:
        await started[0][0].app.storage.pair_user("telegram", str(STRANGER), "Sam")
        hooks = [hook for _, hook in started]
        try:
            assert await tg.apost_to_webhook(dm_update(1, "one"), url=hooks[0]) == 200
            await fake_api.await_requests(1, timeout=30)  # run 1 is calling the model: nothing spent yet
            assert await tg.apost_to_webhook(dm_update(2, "two"), url=hooks[1]) == 200
            await inbox_states(url, [("one", "running"), ("two", "queued")])  # admitted at 0 of 1,500
            first.set()  # run 1 spends 1,000; run 2 (admitted, 1,000 < 1,500) calls the model
            await fake_api.await_requests(2, timeout=30)
            assert await tg.apost_to_webhook(dm_update(3, "three"), url=hooks[2]) == 200
            await inbox_states(url, [("two", "running"), ("three", "queued")])  # admitted at 1,000
            second.set()  # run 2 crosses the budget: 2,000 of 1,500, one turn over
            third = await started[0][0].bot_text(
                STRANGER, lambda t: "today's budget of 1,500 tokens" in t or t == "answer three", timeout=30
            )
            # Run 3 stops before its first model call: 2,000 are spent, it would make 3,000.
            assert (third.text or "").startswith("(Stopped: you've used today's budget of 1,500 tokens"), third.text
            assert await tg.apost_to_webhook(dm_update(4, "four"), url=hooks[0]) == 200
            refused = await started[0][0].bot_text(STRANGER, lambda t: t.startswith("You've used today's budget"))
            assert "1,500 tokens" in (refused.text or "")
            await inbox_settled(url, 4)
            for h, _ in started:
                await h.app.conversations.lanes.drain()
        finally:
            first.set()
            second.set()
        storage = started[0][0].app.storage
        spent = await storage.window_tokens(datetime(2000, 1, 1).astimezone(), requester=f"telegram:{STRANGER}")
        assert spent <= budget + 1000, f"spent {spent} of a {budget} budget: more than one turn over"
        assert [m.text for m in tg.bot_messages(STRANGER) if (m.text or "").startswith("answer")] == [
            "answer one", "answer two"
        ]
        assert len(fake_api.requests) == 2


async def test_breaker_opened_on_replica_a_sends_replica_b_to_the_fallback_without_trying_the_model(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Three overloaded answers on replica A open its breaker for the primary model; a
    message on replica B then goes straight to the fallback (no fourth request to the
    primary), and /status on C shows the primary as unavailable."""
    tg.add_chat(GROUP, type="group", title="Team")
    fake_api.script_when(lambda body: body["model"] == PRIMARY, *[Error(529) for _ in range(3)])
    fake_api.responder = lambda body: reply_text(f"from {body['model']}")
    agent = {"model": PRIMARY, "fallback_models": [BACKUP], "max_retries": 0}
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, REPLICAS, agent=agent) as started:
        (a, hook_a), (b, hook_b), (c, _) = started
        for n in range(3):
            assert await tg.apost_to_webhook(group_update(30_000 + n, f"a{n}"), url=hook_a) == 200
            await inbox_settled(url, n + 1)
            await a.app.conversations.lanes.drain()
        assert a.app.breakers is not None and a.app.breakers.for_model(PRIMARY).state == "open"
        assert await tg.apost_to_webhook(group_update(30_010, "on b"), url=hook_b) == 200
        await inbox_settled(url, 4)
        await b.app.conversations.lanes.drain()
        primary = [r for r in fake_api.requests if (r.json or {}).get("model") == PRIMARY]
        assert len(primary) == 3, "replica B tried the model replica A found down"
        texts = [m.text or "" for m in tg.bot_messages(GROUP)]
        assert texts[-1].startswith(f"from {BACKUP}") and "is paused after repeated failures" in texts[-1], texts
        assert c.app.breakers is not None
        await c.app.breakers.refresh()
        (status,) = [s for s in c.app.breakers.statuses() if s.model == PRIMARY]
        assert status.state == "open" and status.last_error == "overloaded"


class WallClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_after_the_cooldown_one_replica_probes_and_the_others_go_elsewhere(dialect: str) -> None:
    """Breakers of three replicas on one database: opened by one, after the cooldown exactly
    one of them gets the probe; its success closes the breaker for all."""
    clock = WallClock()
    async with fresh_postgres_database() as url:
        storage = await Storage.open(url)
        try:
            three = [Breakers(store=storage, clock=clock, cooldown_s=60) for _ in range(REPLICAS)]
            for _ in range(3):
                permit = await three[0].acquire(PRIMARY)
                assert permit is not None
                await three[0].failed(permit, "overloaded")
            assert [await b.acquire(PRIMARY) for b in three] == [None, None, None]  # open everywhere
            clock.now += 61
            permits = await asyncio.gather(*(b.acquire(PRIMARY) for b in three))
            probes = [p for p in permits if p is not None]
            assert len(probes) == 1 and probes[0].probe, permits
            prober = three[permits.index(probes[0])]
            await prober.succeeded(probes[0])
            again = [await b.acquire(PRIMARY) for b in three]
            assert all(p is not None and not p.probe for p in again)  # closed for every replica
        finally:
            await storage.aclose()


async def test_replicas_admitting_at_once_never_both_take_the_last_place_in_a_window(dialect: str) -> None:
    """Thirty messages of one user checked at the same moment by three replicas (each its
    own engine and connections): exactly the limit of 3 is admitted."""
    settings = LimitSettings(user=ScopeLimits(messages_per_minute=3, runs_per_hour=0, daily_tokens=0))
    async with fresh_postgres_database() as url:
        storages = [await Storage.open(url, migrate=i == 0) for i in range(REPLICAS)]
        try:
            limiters = [RateLimiter(s, s, lambda: settings, windows=s) for s in storages]
            message = Inbound("telegram", "private", "42", "42", "Sam", "hi")
            checks = [limiters[i % REPLICAS].check(message, "dm:telegram:42", is_owner=False) for i in range(30)]
            results = await asyncio.gather(*checks)
            assert sum(r is None for r in results) == 3, results
            assert sum(r is not None and r.notice is not None for r in results) == 1  # told once
        finally:
            for s in storages:
                await s.aclose()
