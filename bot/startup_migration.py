"""`roost run` migrates a database that is not at head in a child process.

Alembic, its mako templates and the dialect modules the migration scripts import stay in
memory for good once imported (~10 MB of a serving process's RSS, bench/bench_rss.py). So a
first start (or the first start after an upgrade of Roost) runs `roost init` in a child
interpreter and waits for it; the serving process then opens a database already at head,
which `bot.storage.migrate.upgrade` checks by plain SQL without importing Alembic.

The child gets the parent's environment, so it loads the very same settings. `roost init`,
`roost chat` and the tests keep migrating in process (`Storage.open`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from bot.storage.engine import create_engine
from bot.storage.migrate import SCHEMA_HEAD


class MigrationFailed(Exception):
    """The child could not migrate; the message is its own one-line, redacted reason."""


async def needs_upgrade(url: str) -> bool:
    """True when the database answers and is not at SCHEMA_HEAD (no table yet included).

    A database that cannot be reached at all says False: `Storage.open` then reports it in
    process, with the same message as before."""
    engine = create_engine(url)
    try:
        try:
            async with engine.connect() as connection:
                try:
                    version = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar()
                except DBAPIError:  # no alembic_version table: never migrated
                    return True
        except Exception:  # unreachable or refused: not ours to report
            return False
        return version != SCHEMA_HEAD
    finally:
        await engine.dispose()


async def migrate_in_child(log_level: str | None = None) -> None:
    """Run `python -m bot.cli init` and wait for it; raise MigrationFailed with its reason."""
    argv = [sys.executable, "-m", "bot.cli"]
    if log_level:
        argv += ["--log-level", log_level]
    process = await asyncio.create_subprocess_exec(
        *argv, "init",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )  # fmt: skip
    try:
        _, err = await process.communicate()
    except BaseException:  # cancelled (Ctrl-C): the child must not outlive us mid-migration
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with contextlib.suppress(Exception):
            await asyncio.shield(process.wait())
        raise
    if process.returncode != 0:
        raise MigrationFailed(_reason(err.decode(errors="replace"), process.returncode))


def _reason(stderr: str, code: int | None) -> str:
    # The child's own `roost: ...` line (already redacted there) is the reason; a child that
    # died without one (killed, crashed in the interpreter) is described by its exit code.
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("roost: "):
            return line.removeprefix("roost: ")
    tail = lines[-1] if lines else "no output"
    return f"the migration process exited with code {code} ({tail})"
