"""Attacks on the hot path's writer (bot.storage.writer) and the Storage lifecycle around it:
never wedge, never lose, never duplicate, never answer a caller with another's outcome."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.engine import Connection

from bot.storage import Storage
from bot.storage import engine as storage_engine
from bot.storage.models import NoticeSentModel
from bot.storage.records import StorageClosed
from bot.storage.writer import SqliteRunner
from tests.storage_fixtures import FakeClock
from tests.test_storage_writer import _note, _refs, storage  # noqa: F401  (fixture)

_NOTICES = NoticeSentModel.__table__


async def _queued_together(storage: Storage, *bodies: Any) -> list[Any]:
    """Run `bodies` in one group commit (they queue while the lock is held)."""
    assert storage._serial is not None
    async with storage._serial:
        calls = [asyncio.create_task(storage._transact(b)) for b in bodies]
        await asyncio.sleep(0)
    async with asyncio.timeout(30):
        return await asyncio.gather(*calls, return_exceptions=True)


async def test_a_body_raising_stopiteration_does_not_cancel_the_other_callers(storage: Storage) -> None:
    """`next()` on an empty iterator inside a body: asyncio refuses StopIteration as a future's
    exception (TypeError), which killed the committer mid-delivery, so the other callers of
    the batch (whose writes were committed) were answered with CancelledError."""

    def empty_next(conn: Connection) -> str:
        return next(iter(()))

    results = await _queued_together(storage, _note("a"), empty_next, _note("b"))
    assert results[0] == "a" and results[2] == "b", results
    assert isinstance(results[1], Exception) and not isinstance(results[1], asyncio.CancelledError)
    # And the runner still works.
    assert await storage._transact(_note("c")) == "c"
    assert await _refs(storage) == {"a", "b", "c"}


async def test_a_lone_body_raising_stopiteration_raises_an_error_not_a_cancellation(storage: Storage) -> None:
    def empty_next(conn: Connection) -> str:
        return next(iter(()))

    (result,) = await _queued_together(storage, empty_next)
    assert isinstance(result, RuntimeError), repr(result)


class _Abort(BaseException):
    """Not an Exception: e.g. a KeyboardInterrupt-like signal raised inside a body."""


async def test_a_baseexception_in_a_body_never_reports_success_for_rolled_back_writes(
    storage: Storage,
) -> None:
    def aborting(conn: Connection) -> None:
        _note("aborted")(conn)
        raise _Abort

    results = await _queued_together(storage, _note("a"), aborting, _note("b"))
    committed = await _refs(storage)
    for ref, result in zip(("a", None, "b"), results, strict=True):
        if result == ref:
            assert ref in committed, f"{ref} reported committed but was rolled back"
        else:
            assert ref not in committed
            # An error the caller can tell from its own cancellation.
            assert not isinstance(result, asyncio.CancelledError), repr(result)
    assert "aborted" not in committed
    assert storage._serial is not None and not storage._serial.locked()
    assert await storage._transact(_note("after")) == "after"


async def test_a_transaction_in_flight_at_close_does_not_hold_the_write_lock_after_aclose_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like the flaky "database is locked at BEGIN IMMEDIATE during upgrade() of a second app
    opened right after the first closed": aclose() returned while a transaction on the pool's
    connection (a `_tx` of a task still running) held SQLite's write lock, so the next opener's
    BEGIN IMMEDIATE had to wait on it. Here with a short busy timeout so that wait fails fast."""
    monkeypatch.setattr(storage_engine, "SQLITE_BUSY_TIMEOUT_MS", 200)
    url = f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}"
    first = await Storage.open(url)
    inside, second_opened = asyncio.Event(), asyncio.Event()

    async def slow_tx() -> None:
        async with first._tx() as s:
            await s.execute(insert(_NOTICES).values(kind="test", ref="slow", sent_at=FakeClock().now))
            inside.set()
            # A transaction still running when the app shuts down: it ends by itself (3 s,
            # far beyond the opener's 200 ms busy timeout) or once the next app opened.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(second_opened.wait(), 3)

    slow = asyncio.create_task(slow_tx())
    try:
        async with asyncio.timeout(30):
            await inside.wait()
            await first.aclose()
            try:
                second = await Storage.open(url)  # upgrade(): BEGIN IMMEDIATE
            finally:
                second_opened.set()
            try:
                assert await _refs(second) == {"slow"}
            finally:
                await second.aclose()
            await slow
    finally:
        second_opened.set()
        if not slow.done():
            slow.cancel()


async def test_a_transaction_queued_at_close_is_refused_not_run_after_aclose_returned(tmp_path: Path) -> None:
    """A `_tx` already waiting for the serial lock when aclose() began still began its
    transaction once the lock was free: a write after close (with a transaction in flight at
    close, even after aclose() had returned)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}"
    storage = await Storage.open(url)
    assert storage._serial is not None
    ran_after_close: list[bool] = []

    async def queued() -> None:
        async with storage._tx() as s:
            ran_after_close.append(storage.closed)
            await s.execute(insert(_NOTICES).values(kind="test", ref="queued", sent_at=FakeClock().now))

    await storage._serial.acquire()
    task = asyncio.create_task(queued())
    await asyncio.sleep(0)
    closing = asyncio.create_task(storage.aclose())
    await asyncio.sleep(0)
    storage._serial.release()
    async with asyncio.timeout(30):
        await asyncio.wait([task, closing])
    assert closing.exception() is None
    assert ran_after_close == [], "a transaction began after the storage was closed"
    assert isinstance(task.exception(), StorageClosed)


async def test_an_error_that_aborts_the_whole_batch_reports_every_body_failed(storage: Storage) -> None:
    """An error that makes SQLite roll back the whole transaction makes
    `ROLLBACK TO body` itself fail: no body of the batch may be reported committed."""

    def interrupted(conn: Connection) -> None:
        _note("interrupted")(conn)
        # A conflict resolved OR ROLLBACK: SQLite ends the whole transaction, as it does on
        # SQLITE_FULL / IOERR / NOMEM / INTERRUPT.
        conn.exec_driver_sql(
            "INSERT OR ROLLBACK INTO notices_sent (kind, ref, sent_at) VALUES ('test', 'a', '2026-01-01')"
        )

    results = await _queued_together(storage, _note("a"), interrupted, _note("b"))
    assert not isinstance(results[1], str)
    committed = await _refs(storage)
    for ref, result in zip(("a", "interrupted", "b"), results, strict=True):
        assert (result == ref) == (ref in committed), (ref, result, committed)
    assert "interrupted" not in committed
    # Nothing left open on the writer's connection: the next batch commits.
    assert await storage._transact(_note("next")) == "next"
    assert "next" in await _refs(storage)


async def test_committer_cancelled_mid_batch_leaves_no_lock_and_no_caller_waiting(storage: Storage) -> None:
    """At loop shutdown the group-commit task is cancelled while the thread runs a batch: the
    batch still ends (committed) before the lock is released, and every caller hears back."""
    assert isinstance(storage._runner, SqliteRunner)
    storage._runner.on_loop_allowed = False  # a body that waits midway: only on the thread
    inside, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> str:
        _note("slow")(conn)
        inside.set()
        release.wait(30)
        return "slow"

    first = asyncio.create_task(storage._transact(slow))
    assert await asyncio.to_thread(inside.wait, 30)
    queued = asyncio.create_task(storage._transact(_note("queued")))
    await asyncio.sleep(0)
    runner = storage._runner
    assert isinstance(runner, SqliteRunner) and runner._committer is not None
    runner._committer.cancel()
    await asyncio.sleep(0)
    assert storage._serial is not None and storage._serial.locked(), "held until the batch ends"
    release.set()
    async with asyncio.timeout(30):
        outcomes = await asyncio.gather(first, queued, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) or o in ("slow", "queued") for o in outcomes)
    assert not storage._serial.locked()
    committed = await _refs(storage)
    assert "slow" in committed  # it had begun: it ended, committed
    assert ("queued" in committed) == (outcomes[1] == "queued")
    assert await storage._transact(_note("after")) == "after"


async def test_two_storages_on_one_file_wait_for_each_other_instead_of_failing(tmp_path: Path) -> None:
    """Each Storage has its own serial lock and writer thread: they meet only in SQLite's busy
    handler, which must make them wait, never fail with "database is locked"."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}"
    one = await Storage.open(url)
    two = await Storage.open(url)
    try:
        calls = []
        for i in range(40):
            for n, storage in enumerate((one, two)):
                calls.append(storage._transact(_note(f"w{n}-{i}")))
                calls.append(storage.claim_notice("test", f"p{n}-{i}"))
        async with asyncio.timeout(60):
            results = await asyncio.gather(*calls)
        assert all(r is not None for r in results)
        assert len(await _refs(one)) == 160
    finally:
        await one.aclose()
        await two.aclose()


async def test_ctrl_c_inside_a_body_on_the_loop_is_not_swallowed_and_rolls_back(storage: Storage) -> None:
    """On the loop a KeyboardInterrupt may land in any body: turned into a body's error (as on
    the thread, where it cannot be the process's), the owner's Ctrl-C would vanish."""
    assert await storage._transact(_note("connect")) == "connect"
    runner = storage._runner
    assert isinstance(runner, SqliteRunner) and runner._on_loop

    def interrupted(conn: Connection) -> None:
        _note("interrupted")(conn)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner._in_transaction([_note("a"), interrupted], wait=False)
    assert runner._conn is not None and not runner._conn.connection.driver_connection.in_transaction
    assert await _refs(storage) == {"connect"}
    assert await storage._transact(_note("after")) == "after"
