"""On a test's timeout, print what every asyncio task of the test's loop is waiting on.

pytest-timeout prints each thread's stack; for an async test that only shows the event
loop idle in `select`, not which `await` never finished. Its SIGALRM handler runs on the
main thread, inside the running loop, so just before it raises we walk each task's chain
of awaits (coroutine → the coroutine or future it awaits → …) and print file:line of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest


def _suspended_generator(frame: FrameType) -> Any:
    """The async generator a frame awaits through `anext`/`athrow` (as contextlib's
    `__aexit__` does): those awaitables do not expose it, the frame's locals do."""
    for value in [*frame.f_locals.values(), getattr(frame.f_locals.get("self"), "gen", None)]:
        if inspect.isasyncgen(value) and value.ag_await is not None:
            return value
    return None


def _await_chain(awaitable: Any) -> Iterator[str]:
    seen = 0
    while awaitable is not None and seen < 64:
        seen += 1
        frame: FrameType | None = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "ag_frame", None)
        if frame is not None:
            yield f"    {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        elif isinstance(awaitable, asyncio.Future):
            yield f"    waiting on {awaitable!r}"[:300]
            return
        awaited = getattr(awaitable, "cr_await", None) or getattr(awaitable, "ag_await", None)
        if awaited is not None and frame is not None and not hasattr(awaited, "cr_frame") and not isinstance(awaited, asyncio.Future):
            awaited = _suspended_generator(frame) or awaited
        awaitable = awaited


def print_tasks(out: Any = sys.stderr) -> None:
    loop = asyncio._get_running_loop()
    if loop is None:
        return
    print(f"{'+' * 20} asyncio tasks at the timeout {'+' * 20}", file=out)
    for task in asyncio.all_tasks(loop):
        print(f"  task {task.get_name()}:", file=out)
        for line in _await_chain(task.get_coro()):
            print(line, file=out)


ACTIVITY = """
SELECT pid, datname, state, wait_event_type, wait_event, pg_blocking_pids(pid) AS blocked_by,
       round(extract(epoch FROM now() - xact_start)::numeric, 1) AS xact_s, left(query, 120) AS query
FROM pg_stat_activity WHERE datname LIKE 'roost_t_%' AND pid != pg_backend_pid() ORDER BY datname, pid
"""


def print_postgres_sessions(out: Any) -> None:
    """The test databases' sessions: a statement waiting on a lock, or a transaction left
    open, is the usual cause of a wait with no task of its own (asyncpg awaits a future)."""
    raw = os.environ.get("ROOST_TEST_POSTGRES_URL")
    if not raw:
        return

    async def query() -> list[Any]:
        import asyncpg
        from sqlalchemy.engine import make_url

        from tests.storage_fixtures import _asyncpg_dsn

        conn = await asyncpg.connect(_asyncpg_dsn(make_url(raw)), timeout=5)
        try:
            return list(await conn.fetch(ACTIVITY, timeout=5))
        finally:
            await conn.close()

    rows: list[Any] = []

    def run() -> None:
        with contextlib.suppress(Exception):
            rows.extend(asyncio.run(query()))

    thread = threading.Thread(target=run, daemon=True)  # this thread's loop is the test's
    thread.start()
    thread.join(10)
    print(f"{'+' * 20} PostgreSQL sessions of the test databases {'+' * 20}", file=out)
    for row in rows:
        print("  " + " | ".join(f"{k}={row[k]}" for k in row.keys()), file=out)


@pytest.hookimpl(wrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Any:
    result = yield
    installed = signal.getsignal(signal.SIGALRM) if hasattr(signal, "SIGALRM") else None
    if callable(installed):

        def handler(signum: int, frame: FrameType | None) -> None:
            print_tasks(sys.stdout)  # captured with the test's output, shown with its failure
            print_postgres_sessions(sys.stdout)
            installed(signum, frame)

        signal.signal(signal.SIGALRM, handler)
    return result
