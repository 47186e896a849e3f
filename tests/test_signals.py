"""The replicas' signal channel (bot.signals) on a real PostgreSQL: a call is answered by the
replica that serves it, and by nobody else; a lost connection is re-made and the waiters are
told to re-read their rows; on SQLite there is nobody to tell."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bot.signals import Payload, Signals
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database


@contextlib.asynccontextmanager
async def replicas(n: int, **kwargs: float) -> AsyncIterator[list[Signals]]:
    async with fresh_postgres_database() as url:
        started = [Signals(make_url(url), **kwargs) for _ in range(n)]
        try:
            for s in started:
                await s.start()
            yield started
        finally:
            for s in started:
                await s.aclose()


@pytest.mark.parametrize("dialect", ["postgres"])
async def test_a_call_is_answered_by_the_replica_that_holds_it_and_by_nobody_else(dialect: str) -> None:
    async with replicas(3) as [b, a, c]:
        heard: list[Payload] = []

        async def holds_x1(p: Payload) -> Payload | None:
            return {"taken": p["x"]} if p["x"] == 1 else None

        async def never(p: Payload) -> Payload | None:
            heard.append(p)
            return None

        a.serve("approval", holds_x1)
        c.serve("approval", never)
        assert await b.call("approval", {"x": 1}) == {"taken": 1}
        assert await b.call("approval", {"x": 2}, timeout=0.5) is None  # nobody holds it
        assert {"x": 1} in heard and {"x": 2} in heard  # asked of every replica

        told = asyncio.Event()

        async def interrupt(p: Payload) -> Payload | None:
            told.set()
            return None

        a.serve("interrupt", interrupt)
        b.serve("interrupt", interrupt)  # never told its own signal
        await c.publish("interrupt", {"key": "main"})
        await asyncio.wait_for(told.wait(), 10)
        with pytest.raises(ValueError, match="send an id"):
            await b.publish("interrupt", {"text": "x" * 10_000})


@pytest.mark.parametrize("dialect", ["postgres"])
async def test_a_dropped_connection_is_made_again_and_waiters_re_read_their_rows(dialect: str) -> None:
    async with replicas(2, check_s=0.2, recheck_s=3600) as [a, b]:
        rechecked = asyncio.Event()

        async def recheck() -> None:
            rechecked.set()

        a.on_recheck.append(recheck)
        pid = a._conn.get_server_pid()
        admin = await asyncpg.connect(_asyncpg_dsn(make_url(a._dsn)))
        try:
            await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        await asyncio.wait_for(rechecked.wait(), 15)  # reconnected, then told to re-read
        assert a._conn is not None and a._conn.get_server_pid() != pid

        async def answer(p: Payload) -> Payload | None:
            return {"ok": True}

        a.serve("stop", answer)
        assert await b.call("stop", {"key": "main"}) == {"ok": True}  # heard again


async def test_on_sqlite_there_is_nobody_to_tell() -> None:
    alone = Signals(None)
    await alone.start()
    assert not alone.shared
    assert await alone.call("approval", {"id": "x"}, timeout=30) is None  # at once
    await alone.publish("interrupt", {"key": "main"})
    await alone.aclose()
