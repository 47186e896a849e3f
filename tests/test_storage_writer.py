"""The hot path's transactions on file SQLite (bot.storage.writer): bodies that queue up are
committed together, yet each keeps the all-or-nothing of its own transaction, every caller
hears back only once its writes are committed, and the two connections never fight over
SQLite's write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, insert, select
from sqlalchemy.engine import Connection

from bot.storage import Storage
from bot.storage import engine as storage_engine
from bot.storage import writer
from bot.storage.models import NoticeSentModel
from bot.storage.writer import SqliteRunner
from tests.storage_fixtures import FakeClock

_NOTICES = NoticeSentModel.__table__


def _note(ref: str, *, then_fail: bool = False) -> Any:
    """A body that writes one row (and then, maybe, fails)."""

    def body(conn: Connection) -> str:
        conn.execute(insert(_NOTICES).values(kind="test", ref=ref, sent_at=FakeClock().now))
        if then_fail:
            raise RuntimeError(f"body {ref} failed after writing")
        return ref

    return body


async def _refs(storage: Storage) -> set[str]:
    async with storage._tx() as s:
        return set(await s.scalars(select(NoticeSentModel.ref).where(NoticeSentModel.kind == "test")))


@pytest.fixture
async def storage(tmp_path: Path) -> Any:
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    assert isinstance(storage._runner, SqliteRunner)
    yield storage
    await storage.aclose()


async def test_one_failing_body_in_a_group_commit_keeps_the_others_writes_and_loses_its_own(
    storage: Storage,
) -> None:
    begins: list[int] = []
    event.listen(storage._runner.sync_engine, "begin", lambda conn: begins.append(1))
    async with storage._serial:  # a transaction in flight: the bodies below queue up meanwhile
        calls = [
            asyncio.create_task(storage._transact(_note(str(i), then_fail=(i == 7)))) for i in range(20)
        ]
        await asyncio.sleep(0)
    results = await asyncio.gather(*calls, return_exceptions=True)

    assert len(begins) < 20, "the queued bodies were committed together"
    assert isinstance(results[7], RuntimeError)
    assert [r for i, r in enumerate(results) if i != 7] == [str(i) for i in range(20) if i != 7]
    assert await _refs(storage) == {str(i) for i in range(20) if i != 7}


async def test_caller_cancelled_while_queued_writes_nothing(storage: Storage) -> None:
    async with storage._serial:
        doomed = asyncio.create_task(storage._transact(_note("doomed")))
        kept = asyncio.create_task(storage._transact(_note("kept")))
        await asyncio.sleep(0)
        doomed.cancel()
    assert await kept == "kept"
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert await _refs(storage) == {"kept"}


async def test_caller_cancelled_mid_body_does_not_release_the_write_lock_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled caller must not let the next transaction start while its body still holds
    the database in the runner's thread (where a batch runs while another process holds the
    write lock): with a short busy timeout that next write would fail with "database is
    locked"."""
    monkeypatch.setattr(storage_engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    assert isinstance(storage._runner, SqliteRunner)
    storage._runner.on_loop_allowed = False  # a body that waits midway: only on the thread
    try:
        inside, release = threading.Event(), threading.Event()

        def slow(conn: Connection) -> None:
            _note("slow")(conn)
            inside.set()
            release.wait(30)

        caller = asyncio.create_task(storage._transact(slow))
        assert await asyncio.to_thread(inside.wait, 30)
        caller.cancel()
        await asyncio.wait([caller])  # the caller has given up
        other = asyncio.create_task(storage.claim_notice("test", "after"))  # aiosqlite's connection
        await asyncio.sleep(0)
        assert storage._serial is not None and storage._serial.locked(), "still held for the body"
        assert not other.done()
        release.set()
        assert await other is True
        with pytest.raises(asyncio.CancelledError):
            await caller
        # The body was already running: it finished and committed (documented).
        assert await _refs(storage) == {"slow", "after"}
    finally:
        await storage.aclose()


async def test_rows_written_by_the_writer_are_seen_by_the_pool_at_once(storage: Storage) -> None:
    await storage._transact(_note("a"))
    async with storage._tx() as s:
        count = await s.scalar(select(func.count()).select_from(NoticeSentModel))
    assert count == 1


async def test_closing_waits_for_queued_bodies(tmp_path: Path) -> None:
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    pending = [asyncio.create_task(storage._transact(_note(str(i)))) for i in range(5)]
    await asyncio.sleep(0)
    await storage.aclose()
    assert [await p for p in pending] == [str(i) for i in range(5)]
    reopened = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    try:
        assert await _refs(reopened) == {str(i) for i in range(5)}
    finally:
        await reopened.aclose()


async def test_another_process_holding_the_write_lock_does_not_stall_the_event_loop(storage: Storage) -> None:
    """Transactions run on the event loop: if BEGIN there waited out SQLite's busy timeout
    while another process writes, every chat would stall with it. The batch goes to the
    runner's thread instead, and the loop (here: the task that ends the other writer's
    transaction) runs on."""
    assert await storage._transact(_note("first")) == "first"  # connected: the loop's from now
    runner = storage._runner
    assert isinstance(runner, SqliteRunner) and runner._on_loop
    other = sqlite3.connect(storage.engine.url.database, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO notices_sent (kind, ref, sent_at) VALUES ('test', 'other', '2026-01-01')")
        waiting = asyncio.create_task(storage._transact(_note("after")))
        started = time.monotonic()
        for _ in range(20):
            await asyncio.sleep(0)  # the loop turns: nothing on it is waiting for the lock
        # A BEGIN waiting on the loop would hold it for the busy timeout (10 s).
        assert time.monotonic() - started < storage_engine.SQLITE_BUSY_TIMEOUT_MS / 1000 / 4
        assert not waiting.done()
        other.execute("COMMIT")
        async with asyncio.timeout(30):
            assert await waiting == "after"
    finally:
        other.close()
    assert await _refs(storage) == {"first", "other", "after"}


async def test_the_wal_is_checkpointed_while_transactions_run_on_the_loop(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's automatic checkpoint (which fsyncs) is off on the loop's connection: without
    the runner's own, the database file would never take in what the WAL holds."""
    monkeypatch.setattr(writer, "CHECKPOINT_EVERY", 5)
    await storage._transact(_note("connect"))
    runner = storage._runner
    assert isinstance(runner, SqliteRunner)
    database = Path(storage.engine.url.database)
    before = database.stat().st_size

    def big(i: int) -> Any:
        def body(conn: Connection) -> None:
            conn.execute(insert(_NOTICES).values(kind="test", ref=f"{i}-" + "x" * 8000, sent_at=FakeClock().now))

        return body

    for i in range(12):
        await storage._transact(big(i))
    assert runner._checkpointing is not None
    async with asyncio.timeout(30):
        await runner._checkpointing
    assert database.stat().st_size > before + 5 * 8000, "the WAL's pages reached the database file"
