"""Engine settings and the Storage lifecycle."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import event

from bot.storage import Storage, StorageClosed, create_engine

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


async def test_sqlite_file_gets_wal_foreign_keys_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "roost.db"
    async with await Storage.open(f"sqlite+aiosqlite:///{path}") as storage:
        assert path.exists()
        async with storage.engine.connect() as conn:
            pragmas = {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout")
            }
    assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 10_000}


async def test_in_memory_sqlite_works() -> None:
    async with await Storage.open("sqlite+aiosqlite://") as storage:
        assert await storage.mark_update_seen("console", "1") is True
        assert await storage.mark_update_seen("console", "1") is False


def test_unsupported_driver_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported database URL driver"):
        create_engine("sqlite:///x.db")
    with pytest.raises(ValueError, match="postgresql\\+psycopg2"):
        create_engine("postgresql+psycopg2://u@h/db")


async def test_use_after_close_raises(db_url: str) -> None:
    async with await Storage.open(db_url) as storage:
        assert not storage.closed
    assert storage.closed
    with pytest.raises(StorageClosed):
        await storage.get_session("main")
    await storage.aclose()  # idempotent


async def test_naive_datetimes_are_rejected(storage: Storage) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        await storage.add_group_message("group:x:1", "bob", "hi", datetime(2026, 1, 1))


async def test_datetimes_come_back_as_utc_whatever_zone_went_in(
    storage: Storage, clock: FakeClock
) -> None:
    from zoneinfo import ZoneInfo

    local = clock.now.astimezone(ZoneInfo("Asia/Tokyo"))
    await storage.add_group_message("group:x:1", "bob", "hi", local)
    (message,) = await storage.recent_group_messages("group:x:1")
    assert message.at == clock.now and message.at.utcoffset() is not None
    assert message.at.tzname() == "UTC"


async def test_open_failure_is_clean() -> None:
    # Nothing listens on port 1: the error propagates and no pool is left behind.
    with pytest.raises(OSError):
        await Storage.open("postgresql+asyncpg://u:p@127.0.0.1:1/none")


async def test_a_query_cancelled_mid_flight_leaves_the_database_unlocked_after_close(tmp_path: Path) -> None:
    """The cause of a "database is locked" on the next open (`test_workers.py`, once under
    load): a task cancelled while its query ran (the scheduler's, at shutdown) made
    SQLAlchemy close that connection with the cursor still referenced, and Python 3.11's
    close kept the transaction — and the write lock of its BEGIN IMMEDIATE — alive until
    the garbage collector found the cursor."""
    path = tmp_path / "roost.db"
    storage = await Storage.open(f"sqlite+aiosqlite:///{path}")
    query = asyncio.current_task()

    def cancel_mid_flight(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "jobs" in statement:  # the query goes to aiosqlite's thread; the await is cancelled
            assert query is not None
            query.cancel()

    event.listen(storage.engine.sync_engine, "before_cursor_execute", cancel_mid_flight)
    with pytest.raises(asyncio.CancelledError) as cancelled:  # keeps the traceback, and the cursor
        await storage.next_due_at()
    query.uncancel()  # type: ignore[union-attr]
    await storage.aclose()

    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a restart's first write, with no time to wait
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert cancelled.value is not None
