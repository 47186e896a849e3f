"""Two real `roost run` replicas on one PostgreSQL (webhook mode, each its own port and
ROOST_HOME): the replica streaming a long answer is killed with -9 while messages wait
behind it — one of them accepted by the other replica. Within 10 s the survivor marks the
cut-off reply in place, offers to continue it once, and answers the queue once, in order.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database
from tests.replica_support import SECRET, dm, ended, inbox_states, logged, roost_process, texts_answer, until
from tests.telegram_harness import OWNER, TOKEN, free_port, tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

SLOW_START = "Let me think about this carefully, it will take a while."


def replica(tmp_path: Path, name: str, url: str, tg: FakeTelegram, llm: FakeAnthropic) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    hook = f"http://127.0.0.1:{port}/tg/hook"
    process, log = roost_process(tmp_path, name, url, llm, {
        "ROOST_OWNERS": f'["telegram:{OWNER}"]',
        "ROOST_TELEGRAM__BASE_URL": tg.base_url,
        "ROOST_TELEGRAM__MODE": "webhook",
        "ROOST_TELEGRAM__WEBHOOK_URL": hook,
        "ROOST_TELEGRAM__WEBHOOK_LISTEN": f"127.0.0.1:{port}",
        "ROOST_TELEGRAM__WEBHOOK_SECRET": SECRET,
        "TELEGRAM_BOT_TOKEN": TOKEN,
    })  # fmt: skip
    return process, hook, log


async def test_replica_killed_mid_answer_the_other_marks_it_offers_once_and_answers_the_queue_once(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text(SLOW_START, chunk_size=60), Stall(120)))
    fake_api.responder = texts_answer
    async with fresh_postgres_database() as url:
        a, hook_a, log_a = replica(tmp_path, "a", url, tg, fake_api)
        b, hook_b, log_b = replica(tmp_path, "b", url, tg, fake_api)
        try:
            await logged(log_a, "Roost is running")
            await logged(log_b, "Roost is running")
            assert await tg.apost_to_webhook(dm(1, "first: what should I buy?"), url=hook_a, secret=SECRET) == 200
            await tg.await_for(lambda: any(m.text == SLOW_START for m in tg.bot_messages(OWNER)), timeout=30)
            # One message through the other replica (it cannot take the session: queued in
            # the inbox), one through the busy one; then A dies with both waiting.
            assert await tg.apost_to_webhook(dm(2, "second: the milk"), url=hook_b, secret=SECRET) == 200
            await inbox_states(url, [("first: what should I buy?", "running"), ("second: the milk", "queued")])
            assert await tg.apost_to_webhook(dm(3, "third: the eggs"), url=hook_a, secret=SECRET) == 200
            await inbox_states(url, [("first: what should I buy?", "running"), ("second: the milk", "queued"),
                              ("third: the eggs", "queued")])  # fmt: skip
            ended(a, signal.SIGKILL)
            killed = time.monotonic()

            def answered() -> list[str]:
                return [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]

            await tg.await_for(answered, timeout=10)
            assert time.monotonic() - killed <= 10
            await tg.await_for(lambda: any(
                (m.text or "").startswith(SLOW_START) and (m.text or "") != SLOW_START for m in tg.bot_messages(OWNER)
            ), timeout=10)  # the cut-off reply is marked in place
            await inbox_states(url, [])
            texts = [m.text or "" for m in tg.bot_messages(OWNER)]
            # One answer for the queue, each queued message once and in order (the cut-off
            # question precedes them in the transcript, as after a single process's crash).
            (answer,) = answered()
            assert answer.endswith("second: the milk | third: the eggs"), texts
            assert answer.count("second: the milk") == 1 and answer.count("third: the eggs") == 1
            assert sum("Continue" in t or "continue" in t for t in texts) <= 1, texts
            assert len(fake_api.requests) == 2  # the cut-off one and one for the queue: nothing twice
        finally:
            ended(a, signal.SIGKILL)
            ended(b, signal.SIGTERM)


async def test_rolling_restart_sigterm_hands_the_queue_to_the_other_replica(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text(SLOW_START, chunk_size=60), Stall(120)))
    fake_api.responder = texts_answer
    async with fresh_postgres_database() as url:
        a, hook_a, log_a = replica(tmp_path, "a", url, tg, fake_api)
        b, hook_b, log_b = replica(tmp_path, "b", url, tg, fake_api)
        try:
            await logged(log_a, "Roost is running")
            await logged(log_b, "Roost is running")
            assert await tg.apost_to_webhook(dm(1, "first: what should I buy?"), url=hook_a, secret=SECRET) == 200
            await tg.await_for(lambda: any(m.text == SLOW_START for m in tg.bot_messages(OWNER)), timeout=30)
            assert await tg.apost_to_webhook(dm(2, "second: the milk"), url=hook_a, secret=SECRET) == 200
            # Stored before the next is sent (a 200 only says the update was handed over).
            await inbox_states(url, [("first: what should I buy?", "running"), ("second: the milk", "queued")])
            assert await tg.apost_to_webhook(dm(3, "third: the eggs"), url=hook_b, secret=SECRET) == 200
            await inbox_states(url, [("first: what should I buy?", "running"), ("second: the milk", "queued"),
                              ("third: the eggs", "queued")])  # fmt: skip
            a.send_signal(signal.SIGTERM)  # a rolling restart: A stops, B carries on
            assert a.wait(30) == 0

            def answered() -> list[str]:
                return [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]

            await tg.await_for(answered, timeout=15)
            await inbox_states(url, [])
            texts = [m.text or "" for m in tg.bot_messages(OWNER)]
            assert any(t.startswith(SLOW_START) and "stopped" in t for t in texts), texts  # said, not silent
            (answer,) = answered()
            assert answer.endswith("second: the milk | third: the eggs"), texts
            assert answer.count("second: the milk") == 1 and answer.count("third: the eggs") == 1
            assert len(fake_api.requests) == 2
        finally:
            ended(a, signal.SIGKILL)
            ended(b, signal.SIGTERM)


async def advisory_locks(url: str, name: str) -> int:
    """How many replicas hold the advisory lock `bot.leadership.advisory_key(name)`."""
    from bot.leadership import advisory_key

    key = advisory_key(name) & 0xFFFF_FFFF_FFFF_FFFF  # pg_locks shows it as two unsigned halves
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = $1 "
            "AND l.classid::text::bigint = $2 AND l.objid::text::bigint = $3",
            make_url(url).database, key >> 32, key & 0xFFFF_FFFF,
        ))  # fmt: skip
    finally:
        await conn.close()


async def test_scheduler_leader_killed_two_seconds_before_a_due_time_the_job_fires_once_on_time(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from datetime import UTC, datetime, timedelta

    from bot.storage import Storage
    from bot.storage.jobs import NewJob

    fake_api.responder = lambda body: reply_text("stretch reminder done")
    async with fresh_postgres_database() as url:
        a, _, log_a = replica(tmp_path, "a", url, tg, fake_api)
        b = None
        try:
            await logged(log_a, "Roost is running")
            assert await advisory_locks(url, "scheduler") == 1  # A leads
            b, _, log_b = replica(tmp_path, "b", url, tg, fake_api)
            await logged(log_b, "Roost is running")
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
            storage = await Storage.open(url, migrate=False)
            try:  # made on a replica that does not lead, as a chat on B would
                await storage.create_job(NewJob(
                    id="0ce0ce00", name="stretch", prompt="remind me to stretch", session_key="main",
                    platform="telegram", chat_kind="private", chat_id=str(OWNER), thread_id=None,
                    creator=f"telegram:{OWNER}", kind="once", spec=due.isoformat(), timezone="UTC", grace_s=60,
                    next_run_at=due, created_at=due - timedelta(minutes=1),
                ))  # fmt: skip
            finally:
                await storage.aclose()
            await asyncio.sleep(max(0.0, due.timestamp() - 2 - time.time()))  # timing-ok: the scenario's "2 s before"
            ended(a, signal.SIGKILL)

            def fired() -> list[str]:
                return [m.text or "" for m in tg.bot_messages(OWNER) if "stretch reminder done" in (m.text or "")]

            await tg.await_for(fired, timeout=20)
            at = time.time()
            assert abs(at - due.timestamp()) <= 10, f"fired {at - due.timestamp():+.1f} s from its due time"
            await asyncio.sleep(3)  # timing-ok: a second leader's tick would fire within its 2 s nap
            assert len(fired()) == 1 and len(fake_api.requests) == 1
        finally:
            ended(a, signal.SIGKILL)
            if b is not None:
                ended(b, signal.SIGTERM)


async def test_replica_killed_while_its_run_waits_on_an_approval_the_card_expires_and_nothing_runs(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """The approval of a run a dead replica held can never be answered (nobody waits for it):
    the replica taking the session over expires it and closes its card, so no button is left
    that seems to approve something, and the dashboard's inbox does not keep it for ever."""
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok, done"))
    async with fresh_postgres_database() as url:
        a, hook_a, log_a = replica(tmp_path, "a", url, tg, fake_api)
        b, _, log_b = replica(tmp_path, "b", url, tg, fake_api)
        db = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
        try:
            await logged(log_a, "Roost is running")
            await logged(log_b, "Roost is running")
            assert await tg.apost_to_webhook(dm(1, "write the marker"), url=hook_a, secret=SECRET) == 200
            card = await tg.await_for(lambda: next((m for m in tg.bot_messages(OWNER) if "🔐" in (m.text or "")), None),
                                      timeout=30)
            assert card.reply_markup is not None
            assert await db.fetchval("SELECT state FROM approvals") == "pending"
            async def noted() -> bool:  # the card's place is noted just after it is sent
                return await db.fetchval("SELECT chat_ref FROM approvals") is not None

            await until(noted, 10, "the card's place noted")
            ended(a, signal.SIGKILL)
            killed = time.monotonic()

            def closed() -> bool:
                shown = tg.message(OWNER, card.message_id)
                return shown.reply_markup is None and "Expired" in (shown.text or "")

            await tg.await_for(closed, timeout=15)
            assert time.monotonic() - killed <= 10
            assert await db.fetchval("SELECT state FROM approvals") == "expired"
            await tg.await_for(lambda: any((m.text or "").startswith("I was restarted while working on")
                                           for m in tg.bot_messages(OWNER)), timeout=10)
            texts = [m.text or "" for m in tg.bot_messages(OWNER)]
            assert sum(t.startswith("I was restarted while working on") for t in texts) == 1, texts  # offered once
            assert not (tmp_path / "workspace" / "marker.txt").exists()
            assert len(fake_api.requests) == 1
        finally:
            await db.close()
            ended(a, signal.SIGKILL)
            ended(b, signal.SIGTERM)
