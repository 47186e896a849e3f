"""Apply the Alembic migrations in `bot/migrations` to head, in code, at start.

No alembic.ini is needed at runtime: the Config is built here with `script_location`
pointing at the migrations directory inside the package, and the open connection is
shared with `env.py` through `config.attributes`.

Usage at start (what `Storage.open` does unless told not to)::

    engine = create_engine(url)
    await upgrade(engine)            # idempotent; a no-op when already at head

Several processes starting together (scale-out) migrate one after another instead of racing
on DDL: on PostgreSQL the upgrade holds a session-level advisory lock (so Alembic still manages
its own transactions and `autocommit_block` keeps working); on SQLite it runs inside one
`BEGIN IMMEDIATE` transaction.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from pathlib import Path

from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

if TYPE_CHECKING:
    from alembic.config import Config

SCHEMA_HEAD = "0019"
"""The newest revision in bot/migrations/versions (a test keeps the two equal). Knowing it
without Alembic lets a start-up at head skip importing and running Alembic (~0.2 s)."""

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

# Arbitrary constant key for pg_advisory_lock; only has to be unique among Roost's locks.
_PG_MIGRATION_LOCK = 0x526F6F7374_01  # "Roost" + 01

# One lock per event loop (an asyncio.Lock must not be shared between loops).
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def alembic_config() -> Config:
    """A file-less Alembic Config pointing at `bot/migrations`."""
    _import_alembic()
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _import_alembic() -> None:
    """Import Alembic with pygments hidden (unless something loaded it already): Alembic's
    mako templates import it only to colour their own error pages, fall back to plain ones
    without it, and it costs a serving process ~4.5 MB for good (bench/bench_rss.py)."""
    if "alembic" in sys.modules or "pygments" in sys.modules:
        return
    sys.modules["pygments"] = None  # type: ignore[assignment]  # makes `import pygments` fail
    try:
        import alembic.config  # noqa: F401
    finally:
        del sys.modules["pygments"]


def head_revision() -> str:
    """The newest revision id shipped with this code."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "bot/migrations has no revisions"
    return head


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database behind `engine` to `revision` (default head).

    Works on an empty database and on one already at head (no-op). Raises whatever the
    driver raises if a migration fails; the failed migration is rolled back (on SQLite the
    whole upgrade is one transaction).
    """
    if revision == "head" and await _version_in_table(engine) == SCHEMA_HEAD:
        return
    config = alembic_config()
    # Alembic keeps its running environment in module globals (alembic.context, alembic.op):
    # two upgrades interleaving in one process would corrupt each other.
    async with _in_process_lock():
        async with engine.connect() as connection:
            dialect = connection.dialect.name
            if dialect == "postgresql":
                await connection.execute(
                    text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK}
                )
                await connection.commit()
            elif dialect == "sqlite":
                # BEGIN IMMEDIATE (engine hook): the whole upgrade holds the write lock, so
                # another process starting at the same time waits, then finds it at head.
                await connection.begin()
            try:
                await connection.run_sync(_upgrade_sync, config, revision)
                await connection.commit()
            finally:
                if dialect == "postgresql":
                    await _unlock(connection)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or None for a database never migrated."""
    async with engine.connect() as connection:
        return await connection.run_sync(_current_sync)


def _in_process_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _LOCKS.get(loop)
    if lock is None:
        lock = _LOCKS[loop] = asyncio.Lock()
    return lock


async def _version_in_table(engine: AsyncEngine) -> str | None:
    """alembic_version's row by plain SQL; None when the table does not exist yet."""
    try:
        async with engine.connect() as connection:
            return (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    except DBAPIError:
        return None


def _upgrade_sync(connection: Connection, config: Config, revision: str) -> None:
    from alembic import command

    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _current_sync(connection: Connection) -> str | None:
    _import_alembic()
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def _unlock(connection: AsyncConnection) -> None:
    # A failed migration leaves the connection in an aborted transaction; clear it first.
    if connection.in_transaction():
        await connection.rollback()
    await connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
    await connection.commit()
