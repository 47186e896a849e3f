"""Two real `roost run` replicas on one PostgreSQL serving one Discord bot: the one holding
the gateway is killed with -9. Its advisory lock goes with its database connection; within
10 s the other connects the gateway, and its catch-up — from the cursors the dead leader
saved, not the ones it loaded at its own start — answers a message written while no
replica was connected, once. Until then exactly one gateway session of the bot was
connected. The writer is a user paired after both replicas started: the follower never
saw their chat, only the dead leader's saved cursor knows where it was left.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bot.storage import Storage
from tests.discord_harness import CHANNEL, OWNER, STRANGER, TOKEN, dc  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, last_user_text
from tests.fakes.discord_api import FakeDiscord
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database
from tests.replica_support import ended, logged, roost_process

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

def replica(tmp_path: Path, name: str, url: str, dc: FakeDiscord, llm: FakeAnthropic) -> tuple[subprocess.Popen[bytes], Path]:
    return roost_process(tmp_path, name, url, llm, {
        "ROOST_OWNERS": f'["discord:{OWNER}"]',
        "ROOST_DISCORD__API_BASE": dc.api_base,
        "ROOST_DISCORD__GATEWAY_URL": dc.gateway_url,
        "ROOST_DISCORD__ALLOWED_CHANNELS": f'["{CHANNEL}"]',
        "DISCORD_BOT_TOKEN": TOKEN,
    })  # fmt: skip


async def settled(url: str, channel: str, at_least: str, timeout: float = 20) -> None:
    """The channel's cursor is saved past `at_least` and no run is still open: a kill now
    cuts nothing off (that case is tests/test_replica_failover.py's)."""
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
    try:
        deadline = time.monotonic() + timeout
        while True:
            saved = await conn.fetchval(
                "SELECT message_id FROM channel_cursors WHERE platform = 'discord' AND channel_id = $1", channel)
            running = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'running'")
            if saved is not None and int(saved) >= int(at_least) and running == 0:
                return
            assert time.monotonic() < deadline, f"cursor of {channel} is {saved} (≥ {at_least}?), {running} runs open"
            await asyncio.sleep(0.05)  # timing-ok: re-check a condition in the database
    finally:
        await conn.close()


WARM, GAP = "warm up", "written while no replica held the gateway"


def answer_phrases(body: dict[str, Any]) -> Reply:
    """Answers naming the test's phrases in the newest user message (a paired user's text
    reaches the model wrapped as untrusted)."""
    text = last_user_text(body)
    return Reply(Text("answer to " + " | ".join(p for p in (WARM, GAP) if p in text)))


def answers(dc: FakeDiscord, channel: str) -> list[str]:
    return [m.content for m in dc.bot_messages(channel)]


async def test_gateway_leader_killed_the_other_replica_connects_and_answers_what_was_said_meanwhile_once(
    dialect: str, tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = answer_phrases
    dm = dc.dm_channel(STRANGER)
    async with fresh_postgres_database() as url:
        a, log_a = replica(tmp_path, "a", url, dc, fake_api)
        b = None
        try:
            await logged(log_a, "Roost is running")
            b, log_b = replica(tmp_path, "b", url, dc, fake_api)
            await logged(log_b, "Roost is running")
            assert dc.connected_sessions == 1 and dc.peak_sessions == 1, "both replicas opened the gateway"
            storage = await Storage.open(url, migrate=False)
            try:  # the owner pairs Sam (through either replica: it is a row in the database)
                assert await storage.pair_user("discord", STRANGER, "sam")
            finally:
                await storage.aclose()
            warm = dc.say(dm, STRANGER, WARM)
            await dc.await_for(lambda: f"answer to {WARM}" in answers(dc, dm) or None, 30)
            await settled(url, dm, warm)
            dc.hold_connections()  # whatever reconnects waits until the gap is written
            try:
                ended(a, signal.SIGKILL)
                killed = time.monotonic()
                await dc.await_for(lambda: dc.connected_sessions == 0 or None, 10)
                dc.say(dm, STRANGER, GAP)
            finally:
                dc.release_connections()
            await dc.await_for(lambda: len(dc.identifies) == 2 and dc.connected_sessions == 1 or None, 20)
            took = time.monotonic() - killed
            assert took <= 10, f"the other replica connected {took:.1f} s after the kill"
            await dc.await_for(
                lambda: f"answer to {GAP}" in answers(dc, dm) or None, 30
            )
            assert answers(dc, dm) == [f"answer to {WARM}", f"answer to {GAP}"]
            assert dc.connected_sessions == 1 and len(fake_api.requests) == 2
        finally:
            ended(a, signal.SIGKILL)
            if b is not None:
                ended(b, signal.SIGTERM)


async def test_gateway_leader_stopped_with_sigterm_hands_the_gateway_over_and_nothing_is_answered_twice(
    dialect: str, tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = answer_phrases
    dm = dc.dm_channel(OWNER)
    async with fresh_postgres_database() as url:
        a, log_a = replica(tmp_path, "a", url, dc, fake_api)
        b = None
        try:
            await logged(log_a, "Roost is running")
            b, log_b = replica(tmp_path, "b", url, dc, fake_api)
            await logged(log_b, "Roost is running")
            warm = dc.say(dm, OWNER, WARM)
            await dc.await_for(lambda: f"answer to {WARM}" in answers(dc, dm) or None, 30)
            await settled(url, dm, warm)
            a.send_signal(signal.SIGTERM)  # a rolling restart: A stops, B takes the gateway
            stopped = time.monotonic()
            await dc.await_for(lambda: len(dc.identifies) == 2 and dc.connected_sessions == 1 or None, 20)
            took = time.monotonic() - stopped
            assert took <= 10, f"the other replica connected {took:.1f} s after SIGTERM"
            dc.say(dm, OWNER, GAP)
            await dc.await_for(lambda: f"answer to {GAP}" in answers(dc, dm) or None, 30)
            assert a.wait(30) == 0
            assert answers(dc, dm) == [f"answer to {WARM}", f"answer to {GAP}"]
            assert dc.peak_sessions == 1  # A's session ended before B's began
            assert len(fake_api.requests) == 2
        finally:
            ended(a, signal.SIGKILL)
            if b is not None:
                ended(b, signal.SIGTERM)
