"""One `roost run` per SQLite database.

Two serving processes on one SQLite file would both answer every update and race on the
inbox. SQLite is the single-process engine; several processes belong on PostgreSQL (see the
README's "Scaling out"). The lock is an `flock` on a file beside the database, held by an
open descriptor for the process's life: the kernel drops it on any exit, a `kill -9`
included, so it can never be left stuck. PostgreSQL and in-memory SQLite take no lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url

from bot.storage.engine import is_memory_sqlite


class AlreadyRunning(Exception):
    """Another `roost run` serves this SQLite database."""


def lock_path(db_url: str) -> Path | None:
    """The lock file for `db_url`, or None when the database needs none."""
    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or is_memory_sqlite(url):
        return None
    assert url.database is not None
    database = Path(url.database).expanduser()
    return database.with_name(database.name + ".run.lock")


def hold_run_lock(db_url: str) -> int | None:
    """Take the run lock for `db_url` (a descriptor kept open until the process ends), or
    raise AlreadyRunning with the one line to show."""
    path = lock_path(db_url)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        who = f" (process {holder})" if holder else ""
        raise AlreadyRunning(
            f"another `roost run`{who} already serves the SQLite database {path.parent / path.name.removesuffix('.run.lock')}; "
            "SQLite serves one process — to run several replicas, set ROOST_DATABASE_URL to "
            "PostgreSQL (README: Scaling out)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _read_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
