"""Create the AsyncEngine for a database URL, with the SQLite settings Roost relies on.

Supported URLs: `sqlite+aiosqlite:///path/to/roost.db` (the parent directory is created),
`sqlite+aiosqlite://` (in-memory, one shared connection; for tests), and
`postgresql+asyncpg://user:pass@host/db`.

SQLite connections get, on connect: WAL journal (readers never block the writer),
`foreign_keys=ON` (off by default in SQLite), and `busy_timeout` (wait for the write lock
instead of failing with "database is locked"). Every SQLite transaction starts with
`BEGIN IMMEDIATE`: a deferred transaction that reads and then writes can hit SQLITE_BUSY
*without* the busy handler being consulted when another connection wrote meanwhile; taking
the write lock up front makes concurrent writers simply queue. Transactions here are short.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool
from sqlalchemy.util import await_

SQLITE_BUSY_TIMEOUT_MS = 10_000
SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")


PG_POOL_SIZE = 5
PG_POOL_OVERFLOW = 5
"""A replica's pooled PostgreSQL connections: at most 10 (transactions are milliseconds
long; a burst waits for a free one), plus up to 4 of its own (lane locks, signals, the
scheduler's and a platform's lead). SQLAlchemy's default overflow (10 more) let three busy
replicas open 53 connections, and two such deployments' worth exhausted PostgreSQL's
default 100 ("too many clients": refused claims, lost locks)."""


def create_engine(url: str | URL, *, echo: bool = False) -> AsyncEngine:
    """Build an engine for `url`; raises ValueError for a driver Roost does not support."""
    parsed = make_url(url)
    driver = f"{parsed.get_backend_name()}+{parsed.get_driver_name()}"
    if driver not in SUPPORTED_DRIVERS:
        raise ValueError(
            f"unsupported database URL driver {driver!r}; use one of {', '.join(SUPPORTED_DRIVERS)}"
        )
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, echo=echo)
    # pre_ping: a PostgreSQL server restart must not surface as an error on the next query.
    return create_async_engine(
        parsed, echo=echo, pool_pre_ping=True, pool_size=PG_POOL_SIZE, max_overflow=PG_POOL_OVERFLOW
    )


def is_memory_sqlite(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or database.startswith("file::memory:")


class EndsTransactionOnClose(sqlite3.Connection):
    """Rolls back an open transaction before closing. Since Python 3.11 `close` leaves the
    database open while a statement of it is alive (`sqlite3_close_v2`): a query cancelled
    mid-flight makes SQLAlchemy invalidate and close its connection with the cursor still
    referenced (from the cancelled task's traceback), and the closed connection kept its
    BEGIN IMMEDIATE's write lock until the garbage collector found the cursor — the next
    opener of the database (a restart, `roost init`) got "database is locked"."""

    def close(self) -> None:
        try:
            if self.in_transaction:
                self.rollback()
        except sqlite3.Error:
            pass  # closing goes on; SQLite rolls back when the connection really closes
        super().close()


def _sqlite_engine(url: URL, *, echo: bool) -> AsyncEngine:
    kwargs: dict[str, Any] = {}
    memory = is_memory_sqlite(url)
    if memory:
        # Each new connection to ":memory:" is a new empty database: share a single one.
        kwargs["poolclass"] = StaticPool
    else:
        assert url.database is not None
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, echo=echo, connect_args={"factory": EndsTransactionOnClose}, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module; the "begin" hook issues it.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
                # With WAL, NORMAL stays consistent after a crash and only risks the last
                # commits on power loss; FULL fsyncs every commit (~15 ms each here).
                cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Straight to aiosqlite: one trip to its thread instead of three (cursor, execute,
        # close through SQLAlchemy's cursor adapter); a transaction begins on every _tx.
        try:
            await_(connection.connection.driver_connection.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:  # surfaced as SQLAlchemy would (e.g. OperationalError)
            raise DBAPIError.instance("BEGIN IMMEDIATE", (), exc, sqlite3.Error) from exc

    return engine
