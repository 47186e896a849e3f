"""Replicas on one PostgreSQL: a message one replica stored (and confirmed to Telegram) but
had not routed yet is never overtaken by a newer message of its chat that another replica
routes, and is never lost: while its replica lives it is left to it; once that replica is
gone another one adopts it and answers it, before the newer one.

The "other replica" is simulated at the database, as it would look to the live one: an inbox
row left `received`, stamped with a replica name whose lock the test holds (alive) and then
lets go (killed -9: PostgreSQL frees a dead connection's locks). The live replica is the
real app, fed through its webhook by python-telegram-bot's own server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text as sa_text
from sqlalchemy.engine import make_url

from agent_core.inbound import Inbound

from bot.lane_claims import replica_lock_key
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database
from tests.replica_support import SECRET, dm, texts_answer, until, webhook_replicas
from tests.telegram_harness import OWNER, free_port, running, tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

async def left_received(conn: asyncpg.Connection, text: str, update_id: int, by: str, ago_s: float) -> int:
    """An owner's message stored `received` by the replica `by`, `ago_s` seconds ago."""
    at = datetime.now(UTC) - timedelta(seconds=ago_s)
    await conn.execute(
        "INSERT INTO seen_updates (platform, update_id, seen_at) VALUES ('telegram', $1, $2)", str(update_id), at
    )
    return int(await conn.fetchval(
        "INSERT INTO inbox (platform, chat_kind, chat_id, sender_id, sender_name, text, mentioned, message_id,"
        " update_id, state, received_by, received_at, updated_at)"
        " VALUES ('telegram', 'private', $1, $1, 'Olivia', $2, false, $3, $3, 'received', $4, $5, $5) RETURNING id",
        str(OWNER), text, str(update_id), by, at,
    ))  # fmt: skip


async def test_an_older_unrouted_message_holds_back_a_newer_one_then_is_adopted_when_its_replica_dies(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = texts_answer
    port = free_port()
    hook = f"http://127.0.0.1:{port}/tg/hook"
    telegram = {"mode": "webhook", "webhook_url": hook, "webhook_listen": f"127.0.0.1:{port}", "webhook_secret": SECRET}
    async with fresh_postgres_database() as url:
        dsn = _asyncpg_dsn(make_url(url))
        async with running(tmp_path, tg, fake_api, paced=False, telegram=telegram, database_url=url) as h:
            replicas = h.app.conversations.replicas
            assert replicas is not None
            other, db = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
            try:
                # Replica A (alive: it holds its lock) stored the first message and confirmed
                # it, but its chat worker has not routed it yet.
                name = uuid.uuid4().hex
                await other.execute("SELECT pg_advisory_lock($1)", replica_lock_key(name))
                first = await left_received(db, "first: what should I buy?", 1, name, ago_s=10)
                # The second reaches this replica, which routes it at once.
                assert await tg.apost_to_webhook(dm(2, "second: the milk"), url=hook, secret=SECRET) == 200

                async def states() -> list[tuple[str, str, str | None]]:
                    rows = await db.fetch("SELECT text, state, received_by FROM inbox ORDER BY id")
                    return [(r["text"], r["state"], r["received_by"]) for r in rows]

                async def second_queued() -> bool:
                    return [s for _, s, _ in await states()] == ["received", "queued"]

                await until(second_queued, 10, "the second message routed")
                swept = replicas.sweeps
                await until(lambda: replicas.sweeps >= swept + 2, 15, "two sweeps")
                # While A lives its row stays its own, and nothing overtakes it.
                assert (await states())[0] == ("first: what should I buy?", "received", name)
                assert not [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]
                assert fake_api.requests == []

                await other.close()  # A dies: PostgreSQL frees its lock
                died = time.monotonic()

                def answered() -> list[str]:
                    return [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]

                await tg.await_for(answered, timeout=15)
                assert time.monotonic() - died <= 10
                await h.app.conversations.lanes.drain()
                (answer,) = answered()  # both, in the order written, each once
                assert answer.count("first: what should I buy?") == 1 and answer.count("second: the milk") == 1
                assert answer.index("first: what should I buy?") < answer.index("second: the milk"), answer
                assert len(fake_api.requests) == 1
                assert await db.fetchval("SELECT state FROM inbox WHERE id = $1", first) == "done"
                assert await db.fetchval("SELECT count(*) FROM inbox WHERE state != 'done'") == 0
            finally:
                if not other.is_closed():
                    await other.close()
                await db.close()


async def test_two_replicas_adopting_a_dead_replicas_rows_at_once_take_each_row_once(dialect: str) -> None:
    async with fresh_postgres_database() as url:
        dsn = _asyncpg_dsn(make_url(url))
        first = await Storage.open(url)
        second = await Storage.open(url, migrate=False)
        db = await asyncpg.connect(dsn)
        try:
            ids = {await left_received(db, f"m{i}", 100 + i, "gone", ago_s=10) for i in range(40)}
            before = datetime.now(UTC) - timedelta(seconds=2)
            assert await first.unrouted_owners(before) == {"gone"}
            a, b = await asyncio.gather(*(
                s.adopt_inbound("gone", by, before) for s, by in ((first, "a"), (second, "b"))
            ))  # fmt: skip
            got_a, got_b = {r.id for r in a}, {r.id for r in b}
            assert not got_a & got_b and got_a | got_b == ids
            assert [r.id for r in a] == sorted(got_a)  # oldest first
            assert await first.unrouted_owners(before) == set()  # adopted rows count as fresh
            assert await first.adopt_inbound("gone", "c", before) == []
        finally:
            await db.close()
            await first.aclose()
            await second.aclose()


@pytest.mark.parametrize("text", ["late one", "/help"])
async def test_a_replica_routing_late_after_its_lock_dropped_never_answers_what_another_adopted_and_answered(
    dialect: str, text: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Replica A stored a message (confirmed to Telegram) and then, before its chat worker
    routed it, lost its lock connection (a rolling restart's drain, a network blip): to B
    it looks dead, so B adopts the row and answers. A's worker routing it afterwards must
    leave it alone. Before, A queued it again and it was answered twice (CI: "during 15"
    answered twice in the Caddy rolling restart); a command ran twice."""
    fake_api.responder = texts_answer
    tg.add_chat(OWNER, type="private", first_name="Olivia")
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, 2) as started:
        (a, _), (b, _) = started
        claims_a = a.app.conversations.replicas.claims  # type: ignore[union-attr]
        for h, _ in started:  # sweeps at a test's pace (3 s and 2 s in production)
            replicas = h.app.conversations.replicas
            assert replicas is not None
            replicas.sweep_s, replicas.orphan_after_s = 0.2, 0.3
            replicas.wake()
        inbound = Inbound("telegram", "private", str(OWNER), str(OWNER), "Olivia", text, message_id="7", update_id="7")
        taken = await a.app.conversations.take(inbound)  # stored by A, not yet routed
        assert taken is not None
        pid = await claims_a._conn.scalar(sa_text("SELECT pg_backend_pid()"))
        admin = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
        try:  # A's lock connection drops: its identity lock goes with it
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        before = len(tg.bot_messages(OWNER))
        await tg.await_for(lambda: len(tg.bot_messages(OWNER)) > before, timeout=20)  # B adopted it and replied
        await b.app.conversations.lanes.drain()
        await a.app.conversations.handle(taken)  # A's worker gets to it now
        for h, _ in started:
            replicas = h.app.conversations.replicas
            assert replicas is not None
            swept = replicas.sweeps
            await until(lambda: replicas.sweeps >= swept + 2, 15, "two more sweeps")
            await h.app.conversations.lanes.drain()
        replies = [m.text or "" for m in tg.bot_messages(OWNER)][before:]
        assert len(replies) == 1, replies
        assert len(fake_api.requests) == (0 if text.startswith("/") else 1)


async def test_a_stopping_replica_lets_its_lanes_go_at_once_but_never_looks_dead_while_its_adapters_are_open(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A rolling restart: once A's conversations closed, its sessions are B's to take, but A
    still stores what reaches its webhook until its adapter closes. Those rows stay A's to
    route (B adopts them only once A is gone); before, A's identity went with its lanes."""
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, 2) as started:
        (a, _), (b, _) = started
        ra, rb = a.app.conversations.replicas, b.app.conversations.replicas
        assert ra is not None and rb is not None
        name = await ra.identify()
        assert name is not None and await ra.claims.claim("main")
        await a.app.conversations.aclose()  # the drain of a rolling restart: the adapter is still open
        assert await rb.claims.claim("main")  # its lanes are free at once
        assert await rb.claims.alive(name)  # but A is not dead: what it still stores stays its own
        await a.adapter.aclose()
        await ra.claims.aclose()  # as the app's close does, after the adapters
        assert not await rb.claims.alive(name)  # gone with its last connection
