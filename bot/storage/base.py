"""Shared plumbing of the repository mixins: transactions, clock, dialect-aware INSERT."""

from __future__ import annotations

import asyncio
import contextlib

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from bot.storage.records import StorageClosed
from bot.storage.writer import TxBody, TxRunner, runner_for

Clock = Callable[[], datetime]
T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def rowcount(result: Result[Any]) -> int:
    """Rows matched by an UPDATE/DELETE or inserted by an INSERT (0 for ON CONFLICT DO
    NOTHING that hit a conflict); both asyncpg and aiosqlite report it reliably."""
    return int(cast(CursorResult[Any], result).rowcount or 0)


class KnownEmpty:
    """Keys known to have no rows of one kind, so the hot path skips a read that would find
    nothing (a whole transaction per message). Sound only because every insert of that kind
    goes through this process's Storage, which calls `forget` once its write settled; deletes
    never make a known-empty key non-empty. A read marks a key only if no `forget` happened
    since it began (`ticket`), so a write that commits between the read and the mark wins."""

    def __init__(self, capacity: int = 10_000, *, enabled: bool = True) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._forgets = 0
        self._enabled = enabled

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def ticket(self) -> int:
        return self._forgets

    def mark(self, key: str, ticket: int) -> None:
        if not self._enabled or ticket != self._forgets:
            return
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._capacity:
            self._keys.popitem(last=False)

    def forget(self, key: str) -> None:
        self._forgets += 1
        self._keys.pop(key, None)


class RepositoryBase:
    """State every repository mixin uses. Each public method runs one short transaction."""

    def __init__(self, engine: AsyncEngine, *, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock
        self._dialect = engine.dialect.name
        # expire_on_commit=False: rows are turned into records after commit, never reloaded.
        self._sessionmaker = async_sessionmaker(engine, expire_on_commit=False)
        self._closed = False
        # SQLite has one writer, and every transaction here begins IMMEDIATE. Queueing them
        # on an asyncio lock costs nothing; letting them contend inside SQLite means its busy
        # handler sleeping 1–100 ms per retry and, under load, "database is locked".
        self._serial: asyncio.Lock | None = asyncio.Lock() if self._dialect == "sqlite" else None
        # The hot path's transactions, each one synchronous body (see bot.storage.writer).
        self._runner: TxRunner = runner_for(engine, self._serial)
        # Sessions with no compaction / no buffered group message: read once, then not per
        # run. SQLite only: there one serving process writes both, while PostgreSQL may be
        # shared by several serving processes (scale-out). (A `roost chat` beside `roost run`
        # on SQLite that compacts main is not seen by the server until its restart; the server
        # then compacts by itself when due — more tokens sent, nothing lost.)
        single_server = self._dialect == "sqlite"
        self._no_compactions = KnownEmpty(enabled=single_server)
        self._no_group_messages = KnownEmpty(enabled=single_server)
        # Keys of sessions known to exist (no row is ever deleted, so this never goes stale).
        self._existing_sessions: set[str] = set()

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncSession]:
        """One transaction: committed on success, rolled back on any exception."""
        if self._closed:
            raise StorageClosed("storage is closed")
        with _values_refused_as_value_error():
            async with self._serial or contextlib.nullcontext():
                if self._closed:  # closed while this waited for its turn
                    raise StorageClosed("storage is closed")
                async with self._sessionmaker() as session, session.begin():
                    yield session

    async def _transact(self, body: TxBody[T]) -> T:
        """One transaction as a synchronous body of Core statements, run in one hop
        (bot.storage.writer): the way of the transactions every message goes through."""
        if self._closed:
            raise StorageClosed("storage is closed")
        try:  # _values_refused_as_value_error, inline: several of these run per message
            return await self._runner.run(body)
        except StatementError as exc:
            if not isinstance(exc, DBAPIError) and isinstance(exc.orig, ValueError):
                raise exc.orig from exc
            raise

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("clock returned a naive datetime; it must be timezone-aware")
        return now.astimezone(UTC)

    def _insert(self, model: Any) -> Any:
        """`INSERT` supporting ON CONFLICT for the engine's dialect (both spell it the same)."""
        return dialect_insert(self._dialect, model)


def dialect_insert(dialect: str, model: Any) -> Any:
    """`INSERT` supporting ON CONFLICT for `dialect` ("sqlite" or "postgresql")."""
    if dialect == "postgresql":
        # Imported here: the PostgreSQL dialect's modules cost a SQLite process ~2 MB.
        from sqlalchemy.dialects.postgresql import insert

        return insert(model)
    return sqlite.insert(model)


@contextlib.contextmanager
def _values_refused_as_value_error() -> Iterator[None]:
    """A value our types refused (e.g. a naive datetime) is the caller's error: surface it as
    the ValueError it is, not wrapped like a database failure."""
    try:
        yield
    except StatementError as exc:
        if not isinstance(exc, DBAPIError) and isinstance(exc.orig, ValueError):
            raise exc.orig from exc
        raise
