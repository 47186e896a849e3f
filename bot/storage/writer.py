"""A transaction as one plain function of a SQLAlchemy `Connection`, run in one hop.

Every message passes through a few short transactions (store, accept, take, begin, finish).
Through the async ORM each statement of them was a round trip to aiosqlite's thread plus a
trip through the Session machinery: ~1.5–2 ms of CPU per transaction, which held Roost to
~25 messages/s. The hot path's transactions are therefore written as synchronous bodies
(`TxBody`: Core statements built once, no ORM) and run by a `TxRunner`:

- `SqliteRunner`, file SQLite: bodies run on the event loop itself, on a connection of the
  runner's own to the same database. Bodies that queue up while a transaction is in flight
  are committed together (group commit): one BEGIN and one COMMIT for the lot, each body in
  its own SAVEPOINT so one body's failure rolls back only its own writes. Every caller hears
  back only after the COMMIT that made its writes durable. The repository's `serial` lock is
  held around each batch, as around every transaction on aiosqlite's connection, so the two
  never contend for SQLite's write lock. The bodies' statements run straight on the sqlite3
  connection, compiled once (bot.storage.prepared): SQLAlchemy's per-statement execution
  machinery cost more CPU than SQLite's own work.
  On the loop because a hand-off to a thread per batch cost more than the batch: the GIL
  makes the two threads take turns, and each turn is a futex round and cold caches (about a
  third of the CPU per message; bench/bench_core.py). What could make SQLite wait never
  happens on the loop: BEGIN IMMEDIATE runs with no busy timeout, and if another process
  holds the write lock the batch goes to the runner's thread, which waits there; with WAL a
  transaction that has the write lock waits for nothing else; and checkpoints (fsync, ~15 ms
  here, far more on an SD card) run on the thread, never on commit. Without WAL (a file
  system that refuses it) everything runs on the thread.
- `PooledRunner`, PostgreSQL and in-memory SQLite: each body in its own transaction through
  `AsyncConnection.run_sync` on the engine's pool (an in-memory database lives on one
  connection, which only the pool can share).

A caller cancelled before its body started is dropped from the batch. Once a batch runs it
runs to its end (committed or rolled back) before anything else touches the database: the
lock is never released over a transaction still open in the thread.

A body must be quick: it holds the event loop (and, anyway, the GIL) while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from bot.storage import engine as storage_engine
from bot.storage.engine import is_memory_sqlite
from bot.storage.prepared import PreparedConnection

T = TypeVar("T")
TxBody = Callable[[Connection], T]
"""One transaction's work; it must not await, and runs with the transaction already begun."""

MAX_BATCH = 256
"""Bodies committed together at most: bounds how long one transaction holds the write lock."""

CHECKPOINT_EVERY = 500
"""Commits on the loop between two WAL checkpoints on the runner's thread (SQLite's own
automatic checkpoint, after 1,000 pages, would run inside a COMMIT, on the loop)."""

Outcome = tuple[bool, Any]
"""(True, the body's result) or (False, the exception it raised)."""


class TxRunner(Protocol):
    async def run(self, body: TxBody[T]) -> T: ...

    async def aclose(self) -> None: ...

    @property
    def sync_engine(self) -> Engine: ...


def runner_for(engine: AsyncEngine, serial: asyncio.Lock | None) -> TxRunner:
    url = engine.url
    if url.get_backend_name() == "sqlite" and not is_memory_sqlite(url):
        assert serial is not None, "SQLite transactions are serialised"
        return SqliteRunner(url, serial)
    return PooledRunner(engine, serial)


class PooledRunner:
    def __init__(self, engine: AsyncEngine, serial: asyncio.Lock | None) -> None:
        self._engine = engine
        self._serial = serial

    @property
    def sync_engine(self) -> Engine:
        return self._engine.sync_engine

    async def run(self, body: TxBody[T]) -> T:
        async with self._serial or contextlib.nullcontext(), self._engine.begin() as conn:
            return await conn.run_sync(body)

    async def aclose(self) -> None:
        pass  # the engine's owner disposes of its pool


class SqliteRunner:
    """Owns one connection to a file SQLite database, used on the event loop, and a thread
    for what must not run there (connecting, waiting for another process's write lock,
    checkpoints, closing); commits the bodies that wait together (see the module docstring)."""

    def __init__(self, url: URL, serial: asyncio.Lock) -> None:
        self._engine = _sqlite_sync_engine(url)
        self._serial = serial
        self._conn: Connection | None = None
        self._prepared: PreparedConnection | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="roost-sqlite")
        self._waiting: list[tuple[TxBody[Any], asyncio.Future[Any]]] = []
        self._committer: asyncio.Task[None] | None = None
        self._on_loop = False
        """True once connected, when the database is in WAL mode."""
        self._commits = 0
        self._checkpointing: asyncio.Future[None] | None = None
        self.on_loop_allowed = True
        """False: every batch goes to the thread (tests that hold a body midway do this)."""

    @property
    def sync_engine(self) -> Engine:
        return self._engine

    async def run(self, body: TxBody[T]) -> T:
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((body, result))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_waiting(), name="sqlite-group-commit")
        return await result

    async def _commit_waiting(self) -> None:
        batch: list[tuple[TxBody[Any], asyncio.Future[Any]]] = []
        try:
            while self._waiting:
                await asyncio.sleep(0)  # let the tasks already runnable queue their bodies too
                async with self._serial:
                    # Taken once the lock is ours: what queued meanwhile joins, and a caller
                    # cancelled while it waited is left out.
                    batch = [(body, result) for body, result in self._waiting[:MAX_BATCH] if not result.done()]
                    del self._waiting[:MAX_BATCH]
                    outcomes = await self._commit([body for body, _ in batch]) if batch else []
                _deliver(batch, outcomes)
        finally:
            # Only when this task itself is cancelled (the loop is shutting down): nobody
            # must wait forever for an answer that will not come.
            for _, result in batch + self._waiting:
                result.cancel()
            self._waiting.clear()

    async def _commit(self, bodies: list[TxBody[Any]]) -> list[Outcome]:
        try:
            if self._on_loop and self.on_loop_allowed:
                try:
                    outcomes = self._in_transaction(bodies, wait=False)
                except _Busy:
                    pass  # another process writes: wait for it on the thread
                else:
                    self._after_commit_on_loop()
                    return outcomes
            return await _uncancelled(
                asyncio.get_running_loop().run_in_executor(self._thread, self._in_transaction, bodies, True)
            )
        except Exception as exc:  # BEGIN or COMMIT failed: no body's writes happened
            return [(False, exc)] * len(bodies)

    def _in_transaction(self, bodies: list[TxBody[Any]], wait: bool) -> list[Outcome]:
        """`wait`: on the thread, with the busy timeout; else on the loop, where BEGIN
        raises _Busy at once if another connection holds the write lock."""
        conn = self._connection()
        driver = _driver(conn)
        prepared = self._prepared
        assert prepared is not None
        prepared.begin_batch()
        if wait:
            driver.execute(f"PRAGMA busy_timeout={storage_engine.SQLITE_BUSY_TIMEOUT_MS}")
        try:
            try:
                driver.execute("BEGIN IMMEDIATE")  # the engine's "begin" hook sees it begun
            except sqlite3.OperationalError as exc:
                if not wait and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                    raise _Busy from exc
                raise
            return self._run_bodies(conn, driver, bodies, cast(Connection, prepared))
        except Exception:
            raise  # the batch's own error, as it is (the clauses below are for the rest)
        except (KeyboardInterrupt, SystemExit):
            if not wait:
                raise  # on the loop, Ctrl-C or an exit is the process's, not the body's: it goes on
            raise RuntimeError("transaction rolled back: interrupted") from None
        except BaseException as exc:  # not an Exception: `conn.begin()` rolled back every body
            raise RuntimeError(f"transaction rolled back: a body raised {exc!r}") from exc
        finally:
            if driver.in_transaction:  # SA's begin() failed after our BEGIN
                driver.execute("ROLLBACK")
            if wait:
                driver.execute("PRAGMA busy_timeout=0")

    def _run_bodies(
        self, conn: Connection, driver: Any, bodies: list[TxBody[Any]], prepared: Connection
    ) -> list[Outcome]:
        """`prepared`: `conn` as the bodies see it (bot.storage.prepared)."""
        if len(bodies) == 1:  # alone: no savepoint needed, its failure rolls back the whole
            try:
                with conn.begin():
                    return [(True, bodies[0](prepared))]
            except Exception as exc:
                return [(False, exc)]
        outcomes: list[Outcome] = []
        # Savepoints straight on the driver: SQLAlchemy's nested transactions cost more CPU
        # than the bodies' own statements, and nothing here needs their bookkeeping.
        with conn.begin():
            for body in bodies:
                driver.execute("SAVEPOINT body")
                try:
                    value = body(prepared)
                except Exception as exc:
                    driver.execute("ROLLBACK TO body")
                    outcomes.append((False, exc))
                else:
                    outcomes.append((True, value))
                driver.execute("RELEASE body")
        return outcomes

    def _connection(self) -> Connection:
        """Made on the thread (the first batch always goes there: opening may wait for a
        lock); on the loop from then on if the database is in WAL mode."""
        if self._conn is None:
            self._conn = self._engine.connect()
            # The bodies' statements straight on the driver, compiled once (bot.storage.prepared).
            self._prepared = PreparedConnection(self._conn)
            mode = _driver(self._conn).execute("PRAGMA journal_mode").fetchone()
            self._on_loop = bool(mode) and str(mode[0]).lower() == "wal"
        return self._conn

    def _after_commit_on_loop(self) -> None:
        self._commits += 1
        if self._commits < CHECKPOINT_EVERY or not (self._checkpointing is None or self._checkpointing.done()):
            return
        self._commits = 0
        self._checkpointing = asyncio.get_running_loop().run_in_executor(self._thread, self._checkpoint)

    def _checkpoint(self) -> None:
        """A PASSIVE checkpoint on a connection of the thread's own: it never waits for a
        lock, and the loop's writer goes on appending to the WAL meanwhile."""
        try:
            with contextlib.closing(sqlite3.connect(self._engine.url.database or "", timeout=0)) as raw:
                raw.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # the next one, or any other connection's, does it

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._prepared = None
        self._engine.dispose()

    async def aclose(self) -> None:
        if self._committer is not None:
            await asyncio.wait([self._committer])
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=False)


class _Busy(Exception):
    """BEGIN IMMEDIATE on the loop found the write lock taken (by another process)."""


def _driver(conn: Connection) -> Any:
    driver = conn.connection.driver_connection
    assert driver is not None
    return driver


def _deliver(batch: list[tuple[TxBody[Any], asyncio.Future[Any]]], outcomes: list[Outcome]) -> None:
    for (_, result), (ok, value) in zip(batch, outcomes, strict=True):
        if result.done():
            continue  # its caller was cancelled meanwhile
        if ok:
            result.set_result(value)
        elif isinstance(value, StopIteration):  # a Future refuses it (as PEP 479 does)
            error = RuntimeError("transaction body raised StopIteration")
            error.__cause__ = value
            result.set_exception(error)
        else:
            result.set_exception(value)


async def _uncancelled(done: asyncio.Future[T]) -> T:
    """Await work on the thread; a cancellation waits for it to end, then propagates."""
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait([done])
        raise


def _sqlite_sync_engine(url: URL) -> Engine:
    # The same database and settings as bot.storage.engine's, through the stdlib driver.
    # check_same_thread off: the connection is used on the loop and on the runner's thread,
    # never by both at once (one batch at a time).
    engine = create_sync_engine(
        url.set(drivername="sqlite+pysqlite"), poolclass=NullPool, connect_args={"check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the runner begins transactions itself
        # busy_timeout=0: a transaction on the loop must never wait (the thread sets its
        # own for the batches it runs); wal_autocheckpoint=0: checkpoints run on the thread.
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON",
                       "busy_timeout=0", "wal_autocheckpoint=0"):
            dbapi_connection.execute(f"PRAGMA {pragma}")

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        driver = connection.connection.driver_connection
        if not driver.in_transaction:  # type: ignore[union-attr]  # begun by the runner, or not
            driver.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]

    return engine
