"""Two replicas of Roost on one PostgreSQL serving one Discord bot: one gateway session.

Discord dispatches every gateway event to each session of a bot, so two replicas that both
connected would each take in every message and race every button. Only the holder of the
"discord-gateway" lead (bot.leadership: an advisory lock) connects; the other logs in for
REST only and still sends, edits and streams whatever its own lanes answer.

Invariant: at most one gateway session of the bot is connected while the lead is settled;
a replica that lets the lead go (shutting down, or its lock connection dropped) closes its
session and another connects, whose catch-up reads what came meanwhile; every message is
answered once, and a run on the replica without the gateway still finishes on Discord.

The replicas are two full apps in this test process (each its own engine, leads and
discord.py client; they share the database and the workspace); the process-killing case is
tests/test_discord_replica_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from adapters.discord.gateway import GATEWAY_ROLE
from bot.leadership import advisory_key
from tests.discord_harness import OWNER, Harness, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, last_user_text
from tests.fakes.discord_api import FakeDiscord
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

SLOW_START = "Let me think about this carefully,"
SLOW_END = " and the answer is forty-two."


def answers(dc: FakeDiscord, channel: str) -> list[str]:
    """What the bot said in the channel, its "queued behind the current answer" notes aside."""
    return [m.content for m in dc.bot_messages(channel) if not m.content.startswith("⏳")]


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, dc: FakeDiscord, llm: FakeAnthropic, url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    async with contextlib.AsyncExitStack() as stack:
        replicas = []
        for name in ("a", "b"):  # A starts first: it takes the lead
            replicas.append(await stack.enter_async_context(running(
                tmp_path / name, dc, llm, paced=False, database_url=url, workspace=tmp_path / "workspace",
            )))  # fmt: skip
        yield replicas[0], replicas[1]


async def drop_lead_connection(url: str, role: str) -> None:
    """End the database session holding `role`'s advisory lock (a network cut, a restarted
    PostgreSQL): the lock goes with it, as a dead leader's does."""
    key = advisory_key(role) & 0xFFFF_FFFF_FFFF_FFFF
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
    try:
        ended = await conn.fetchval(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND classid = $1 AND objid = $2 AND objsubid = 1) t", key >> 32, key & 0xFFFF_FFFF,
        )  # fmt: skip
        assert ended == 1
    finally:
        await conn.close()


async def test_two_replicas_open_one_gateway_session_and_a_run_finishes_through_rest_after_the_hand_over(
    dialect: str, tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    dm = dc.dm_channel(OWNER)
    slow = Reply(Text(SLOW_START, chunk_size=60), Stall(8), Text(SLOW_END))
    fake_api.responder = lambda body: slow if "first" in last_user_text(body) else Reply(
        Text(f"answer to {last_user_text(body)}"))
    async with fresh_postgres_database() as url, two_replicas(tmp_path, dc, fake_api, url) as (a, b):
        assert dc.connected_sessions == 1 and dc.peak_sessions == 1  # one replica takes messages in
        dc.say(dm, OWNER, "first: a long question")
        await a.bot_text(dm, lambda t: t.startswith(SLOW_START), timeout=20)
        # A (streaming "first") gives the gateway up, as it does when told to stop; B connects.
        await a.adapter.hand_over()
        await dc.await_for(lambda: len(dc.identifies) == 2 and dc.connected_sessions == 1 or None, 20)
        await b.adapter.caught_up()
        dc.say(dm, OWNER, "second: and another")  # reaches B's session only
        await dc.await_for(lambda: any(t.startswith("answer to second") for t in answers(dc, dm)) or None, 40)
        await a.app.conversations.lanes.drain()
        await b.app.conversations.lanes.drain()
        # A's run, with no gateway of its own by then, still streamed to its end through REST.
        assert answers(dc, dm) == [SLOW_START + SLOW_END, "answer to second: and another"]
        assert dc.peak_sessions == 1  # never two sessions taking in the same messages
        assert len(fake_api.requests) == 2


async def test_a_replica_whose_lead_connection_drops_closes_its_gateway_session_and_one_replica_leads_again(
    dialect: str, tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    dm = dc.dm_channel(OWNER)
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))
    async with fresh_postgres_database() as url, two_replicas(tmp_path, dc, fake_api, url) as (a, b):
        dc.say(dm, OWNER, "before")
        await a.bot_text(dm, lambda t: t == "answer to before", timeout=20)
        assert dc.connected_sessions == 1 and len(dc.identifies) == 1
        await drop_lead_connection(url, GATEWAY_ROLE)
        # A notices its lock is gone and ends its session (1000); the first replica to take the
        # lead again connects — usually B, but on a loaded machine A's retry may come first.
        await dc.await_for(lambda: 1000 in dc.gateway_closes and len(dc.identifies) == 2
                           and dc.connected_sessions == 1 or None, 30)  # fmt: skip
        (leader,) = [h for h in (a, b) if h.adapter._gateway is not None and h.adapter._gateway.connector is not None]
        await asyncio.wait_for(leader.adapter.caught_up(), 30)
        dc.say(dm, OWNER, "after")
        await dc.await_for(lambda: "answer to after" in answers(dc, dm) or None, 20)
        await a.app.conversations.lanes.drain()
        await b.app.conversations.lanes.drain()
        assert answers(dc, dm) == ["answer to before", "answer to after"]
        assert dc.connected_sessions == 1
        assert len(fake_api.requests) == 2
