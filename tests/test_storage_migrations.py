"""Alembic migrations: empty database → head on SQLite and PostgreSQL; models match them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from bot.storage import Storage, create_engine, current_revision, head_revision, upgrade
from bot.storage.migrate import MIGRATIONS_DIR, alembic_config
from bot.storage.models import Base

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]

REPO = Path(__file__).resolve().parent.parent
TABLES = {
    "sessions",
    "messages",
    "runs",
    "tool_calls",
    "approvals",
    "grants",
    "seen_updates",
    "deliveries",
    "pairing_requests",
    "paired_users",
    "allowed_groups",
    "group_messages",
}


def _ours(name: str | None, type_: str, _parent: object) -> bool:
    return type_ != "table" or name in Base.metadata.tables


def test_initial_revision_is_0001_and_the_base() -> None:
    # Later migrations (e.g. "0002_memory_index") declare down_revision "0001".
    script = ScriptDirectory.from_config(alembic_config())
    initial = script.get_revision("0001")
    assert initial is not None and initial.down_revision is None
    assert script.get_bases() == ["0001"]
    assert len(script.get_heads()) == 1, "migrations must form a single line"


async def test_upgrade_empty_database_to_head(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        assert await current_revision(engine) is None
        await upgrade(engine)
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as conn:
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        assert TABLES <= tables
        await upgrade(engine)  # already at head: a no-op, not an error
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()


async def test_models_match_migrations(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)

        def diff(conn: Connection) -> list[object]:
            # Only the tables of bot.storage.models: later migrations may add tables that
            # other packages own through raw SQL (the memory index).
            opts = {"compare_type": True, "include_name": _ours}
            context = MigrationContext.configure(conn, opts=opts)
            return list(compare_metadata(context, Base.metadata))

        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


async def test_downgrade_to_base_and_upgrade_again(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        await upgrade(engine)

        def downgrade(conn: Connection) -> None:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "base")

        async with engine.connect() as conn:
            await conn.run_sync(downgrade)
            await conn.commit()
            tables = set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        assert not (TABLES & tables)
        await upgrade(engine)
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()


_UPGRADE_SCRIPT = """
import asyncio, sys
from bot.storage import create_engine, upgrade

async def main() -> None:
    engine = create_engine(sys.argv[1])
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()

asyncio.run(main())
"""


async def test_concurrent_starts_migrate_once(db_url: str) -> None:
    # Several processes starting together (scale-out) plus two engines in this process:
    # none may race on DDL ("table already exists") and all must end at head.
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _UPGRADE_SCRIPT,
            db_url,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    engines = [create_engine(db_url) for _ in range(2)]
    try:
        await asyncio.gather(*(upgrade(e) for e in engines))
        for proc in procs:
            _, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
        assert await current_revision(engines[0]) == head_revision()
    finally:
        for e in engines:
            await e.dispose()


async def test_alembic_cli_reports_head(db_url: str) -> None:
    async with await Storage.open(db_url):
        pass
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "alembic",
        "-c",
        str(MIGRATIONS_DIR / "alembic.ini"),
        "-x",
        f"url={db_url}",
        "current",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert f"{head_revision()} (head)" in out.decode()


async def test_open_without_migrate_leaves_database_empty(db_url: str) -> None:
    async with await Storage.open(db_url, migrate=False) as s:
        assert await current_revision(s.engine) is None


def test_schema_head_constant_matches_the_migrations() -> None:
    from bot.storage.migrate import SCHEMA_HEAD, head_revision

    assert SCHEMA_HEAD == head_revision(), "bump SCHEMA_HEAD in bot/storage/migrate.py with each new migration"


async def test_runs_made_before_0012_keep_counting_against_their_chat_and_user(db_url: str) -> None:
    """Upgrading mid-day must not hand out a fresh budget: a worker's earlier run is charged
    to its parent's chat, a paired user's DM runs to them (not their DM jobs' keys)."""
    from sqlalchemy import text

    engine = create_engine(db_url)
    try:
        await upgrade(engine, "0011")
        async with engine.begin() as conn:
            for run_id, key in [("w1", "worker:w1"), ("d1", "dm:telegram:42"), ("j1", "dm:telegram:42:job-x"),
                                ("g1", "group:telegram:-100:7")]:  # fmt: skip
                await conn.execute(text(
                    "INSERT INTO runs (id, session_key, model, status, turns, input_tokens, output_tokens, "
                    "cache_read_tokens, cache_creation_tokens, started_at) "
                    "VALUES (:id, :key, 'm', 'finished', 1, 1, 1, 0, 0, '2026-01-01 12:00:00')"
                ), {"id": run_id, "key": key})  # fmt: skip
            await conn.execute(text(
                "INSERT INTO worker_runs (id, parent_run_id, session_key, name, task, status, started_at) "
                "VALUES ('w1', 'g1', 'group:telegram:-100:7', 'n', 't', 'completed', '2026-01-01 12:00:00')"
            ))  # fmt: skip
        await upgrade(engine)
        async with engine.connect() as conn:
            rows = dict((r[0], (r[1], r[2])) for r in await conn.execute(text("SELECT id, account, requester FROM runs")))
        assert rows == {
            "w1": ("group:telegram:-100:7", None),
            "d1": ("dm:telegram:42", "telegram:42"),
            "j1": ("dm:telegram:42:job-x", None),
            "g1": ("group:telegram:-100:7", None),
        }
    finally:
        await engine.dispose()
