"""Which of several `roost run` replicas on one PostgreSQL does a once-per-deployment job
(the scheduler): the holder of a session-level advisory lock.

The lock lives on a dedicated connection (outside the pool, so it is never handed to other
work nor returned with the lock still held). PostgreSQL releases it when that connection
ends — the process died, was killed with -9, or lost the network — and the other replicas,
trying every `retry_s`, take over within a few seconds. The holder checks its connection
every `retry_s` too and steps down the moment it fails.

Leadership is a hint, never the guarantee: in the seconds a dead connection goes unnoticed
two replicas may both believe they lead. What must happen once is claimed in the database
by a conditional UPDATE in one transaction (e.g. `Storage.fire_job`), so a double leader
does nothing twice.

SQLite serves one process (bot.instance_lock): that process always leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

RETRY_S = 2.0
"""How often a follower tries the lock and the leader checks its connection: a dead
leader is replaced within about two of these (well inside 10 s)."""


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for `pg_try_advisory_lock` (PostgreSQL's bigint)."""
    return int.from_bytes(hashlib.blake2b(f"roost:{name}".encode(), digest_size=8).digest(), "big", signed=True)


class Leadership:
    def __init__(
        self, engine: AsyncEngine, name: str, *, retry_s: float = RETRY_S, on_change: Callable[[bool], None] | None = None
    ) -> None:
        self.name = name
        self.retry_s = retry_s
        self.on_change = on_change
        self._single = engine.dialect.name != "postgresql"
        # Its own engine without a pool: closing the connection closes the session, lock and all.
        self._engine = None if self._single else create_async_engine(engine.url, poolclass=NullPool)
        self._key = advisory_key(name)
        self._conn: AsyncConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self.held = self._single
        self.changes = asyncio.Condition()

    @property
    def shared(self) -> bool:
        """Other replicas may lead instead (PostgreSQL)."""
        return not self._single

    async def start(self) -> None:
        if self._single or self._task is not None:
            return
        try:
            await self._try_take()
        except Exception as exc:  # the loop retries
            log.warning("leadership.retry", extra={"role": self.name, "error": type(exc).__name__})
            await self._drop()
        self._task = asyncio.create_task(self._loop(), name=f"leadership:{self.name}")

    async def wait_held(self, timeout: float) -> bool:
        """Wait until this replica leads (or `timeout`); whether it does."""
        async with self.changes:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel (3.11)
                    await self.changes.wait_for(lambda: self.held)
        return self.held

    async def wait_for(self, held: bool) -> None:
        """Return once this replica's leadership is `held` (at once if it already is)."""
        async with self.changes:
            await self.changes.wait_for(lambda: self.held == held)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.retry_s)  # timing-ok: the retry period itself
            try:
                if self._conn is None:
                    await self._try_take()
                else:
                    await self._check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server is away: a follower again, retried
                log.warning("leadership.lost" if self.held else "leadership.retry",
                            extra={"role": self.name, "error": type(exc).__name__})
                await self._drop()

    async def _try_take(self) -> None:
        assert self._engine is not None
        async with asyncio.timeout(self.retry_s * 2):
            conn = await self._engine.connect()
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            async with asyncio.timeout(self.retry_s * 2):
                taken = await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key})
        except BaseException:
            await conn.close()
            raise
        if not taken:
            await conn.close()
            return
        self._conn = conn
        log.info("leadership.taken", extra={"role": self.name})
        await self._set(True)

    async def _check(self) -> None:
        assert self._conn is not None
        async with asyncio.timeout(self.retry_s * 2):
            await self._conn.scalar(text("SELECT 1"))

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()  # never back to anyone with the lock held
        await self._set(False)

    async def _set(self, held: bool) -> None:
        if held == self.held:
            return
        self.held = held
        async with self.changes:
            self.changes.notify_all()
        if self.on_change is not None:
            self.on_change(held)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()  # the session ends: the lock goes to another replica now
        self.held = self._single
        if self._engine is not None:
            await self._engine.dispose()
