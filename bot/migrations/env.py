"""Alembic environment for Roost: async-aware, one code path for SQLite and PostgreSQL.

Two ways in:
- at bot start, `bot.storage.migrate.upgrade` hands over an open connection in
  `config.attributes["connection"]` (already inside the caller's event loop);
- from the `alembic` CLI (developer tooling, `-c bot/migrations/alembic.ini -x url=...`),
  this module makes its own async engine and drives it with `asyncio.run`.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from bot.storage.engine import create_engine
from bot.storage.models import Base

config = context.config
target_metadata = Base.metadata


def _include_name(name: str | None, type_: str, _parent_names: object) -> bool:
    # Autogenerate compares only bot.storage's tables: others (the memory index) are created
    # by raw SQL in their own migrations and have no models to compare with.
    return type_ != "table" or name in target_metadata.tables


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_name=_include_name,
        # SQLite cannot ALTER most things; batch mode lets later migrations copy-and-move.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def _cli_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("no database URL: pass -x url=sqlite+aiosqlite:///path/roost.db")
    return url


async def _run_cli() -> None:
    engine = create_engine(_cli_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def _run_offline() -> None:
    context.configure(url=_cli_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


shared_connection: Connection | None = config.attributes.get("connection")
if shared_connection is not None:
    _run(shared_connection)
elif context.is_offline_mode():
    _run_offline()
else:
    if config.config_file_name is not None:
        # Only for the CLI: at runtime the bot's own logging setup must not be replaced.
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    asyncio.run(_run_cli())
