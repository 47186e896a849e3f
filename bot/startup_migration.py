"""`roost run` migrates a database that is not at head in a child process.

Alembic, its mako templates and the dialect modules the migration scripts import stay in
memory for good once imported (~10 MB of a serving process's RSS, bench/bench_rss.py). So a
first start (or the first start after an upgrade of Roost) runs `roost init` in a child
interpreter and waits for it; the serving process then opens a database already at head,
which `bot.storage.migrate.upgrade` checks by plain SQL without importing Alembic.

The child gets the parent's environment, so it loads the very same settings. `roost init`,
`roost chat` and the tests keep migrating in process (`Storage.open`).

Start-up time: at head no child runs (one query decides). A first start is known before
SQLAlchemy is even imported (no database file, or no `alembic_version` in it: the stdlib's
sqlite3 says so), so the child starts at once and migrates while this process imports the
rest of Roost (~0.5 s of the ~1.3 s the child takes; bench/bench_telegram.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
from pathlib import Path

_SQLITE_FILE = "sqlite+aiosqlite:///"


class MigrationFailed(Exception):
    """The child could not migrate; the message is its own one-line, redacted reason."""


async def needs_upgrade(url: str) -> bool:
    """True when the database answers and is not at SCHEMA_HEAD (no table yet included).

    A database that cannot be reached at all says False: `Storage.open` then reports it in
    process, with the same message as before."""
    path = _sqlite_file(url)
    if path is not None:
        version = _sqlite_version(path)
        if version is None:
            return True  # a first start: known without importing SQLAlchemy
        if version is not _UNREADABLE:
            from bot.storage.migrate import SCHEMA_HEAD

            return version != SCHEMA_HEAD
    return await _needs_upgrade_by_sqlalchemy(url)


_UNREADABLE = object()
"""The file exists but cannot be read as expected: SQLAlchemy's path decides (and reports)."""


def _sqlite_file(url: str) -> Path | None:
    rest = url.removeprefix(_SQLITE_FILE)
    if rest == url or not rest or "?" in rest or rest.startswith((":memory:", "file:")):
        return None
    return Path(rest)


def _sqlite_version(path: Path) -> object:
    """The stored revision; None when never migrated (no file, or no version table)."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)) as db:
            try:
                row = db.execute("SELECT version_num FROM alembic_version").fetchone()
            except sqlite3.OperationalError as exc:
                return None if "no such table" in str(exc) else _UNREADABLE
    except sqlite3.Error:
        return _UNREADABLE
    return None if row is None else row[0]


async def _needs_upgrade_by_sqlalchemy(url: str) -> bool:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from bot.storage.engine import create_engine
    from bot.storage.migrate import SCHEMA_HEAD

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


class MigrationChild:
    """A running `python -m bot.cli init`. `wait` returns once it migrated or raises
    MigrationFailed with its reason; `stop` ends it (the serving process gave up)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    @classmethod
    async def start(cls, log_level: str | None = None) -> MigrationChild:
        argv = [sys.executable, "-m", "bot.cli"]
        if log_level:
            argv += ["--log-level", log_level]
        process = await asyncio.create_subprocess_exec(
            *argv, "init",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ),
        )  # fmt: skip
        return cls(process)

    async def wait(self) -> None:
        try:
            _, err = await self._process.communicate()
        except BaseException:  # cancelled (Ctrl-C): the child must not outlive us mid-migration
            await self.stop()
            raise
        if self._process.returncode != 0:
            raise MigrationFailed(_reason(err.decode(errors="replace"), self._process.returncode))

    async def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.terminate()
        with contextlib.suppress(Exception):
            await asyncio.shield(self._process.wait())


def _reason(stderr: str, code: int | None) -> str:
    # The child's own `roost: ...` line (already redacted there) is the reason; a child that
    # died without one (killed, crashed in the interpreter) is described by its exit code.
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("roost: "):
            return line.removeprefix("roost: ")
    tail = lines[-1] if lines else "no output"
    return f"the migration process exited with code {code} ({tail})"
