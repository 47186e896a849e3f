"""Every SQLite transaction begins IMMEDIATE through aiosqlite directly (one trip to its
thread, not three); a database another process holds still fails the way SQLAlchemy
reports it, and the connection stays usable."""

from __future__ import annotations

import sqlite3

from pathlib import Path

import pytest

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from bot.storage import engine as storage_engine


async def test_locked_database_surfaces_as_operational_error_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage_engine, "SQLITE_BUSY_TIMEOUT_MS", 50)  # fail fast, not after 10 s
    db = tmp_path / "roost.db"
    engine = storage_engine.create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the database
        with pytest.raises(OperationalError, match="locked"):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        other.execute("ROLLBACK")
        other.close()
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (2)"))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT x FROM t"))).scalars().all() == [2]
    finally:
        await engine.dispose()


async def test_a_write_after_a_read_in_one_transaction_holds_the_lock_from_the_start(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE, not deferred: a read-then-write transaction owns the write lock
    before its read, so a second writer waits instead of hitting SQLITE_BUSY mid-transaction."""
    db = tmp_path / "roost.db"
    engine = storage_engine.create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        async with engine.begin() as conn:
            await conn.execute(text("SELECT count(*) FROM t"))
            probe = sqlite3.connect(db, timeout=0, isolation_level=None)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                probe.execute("BEGIN IMMEDIATE")
            probe.close()
    finally:
        await engine.dispose()
