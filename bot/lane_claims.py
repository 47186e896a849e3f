"""Which replica runs a session: with several `roost run` on one PostgreSQL, a session's lane
is held by one replica at a time — the one holding the session's advisory lock.

All of a replica's lane locks live on one dedicated connection (outside the pool; session
level, so they outlast transactions and end with the connection: a replica killed with -9
frees its sessions at once). A message accepted by a replica that cannot take the lane
stays `queued` in the inbox, the shared queue; the holder drains it before it lets go
(`Conversations` asks `queued_inbound` before each run and once more after releasing).

Locks are a routing hint backed by the database: the inbox rows a run answers are claimed
conditionally (`Storage.claim_inbound_for_run`), so even two replicas that both believe they hold a
lane (a lock connection that died unnoticed) answer each message once.

The same connection holds the replica's identity lock (`identity`): the rows a replica
stores stay its own to route while it lives, and `alive` tells another replica whether it
still does (its lock went with its connection).

On SQLite (one process, bot.instance_lock) every claim succeeds and nothing is locked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bot.leadership import advisory_key

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0


class LaneClaims:
    def __init__(self, engine: AsyncEngine) -> None:
        self.shared = engine.dialect.name == "postgresql"
        """Other replicas may serve this database: lanes must be claimed."""
        self._engine = create_async_engine(engine.url, poolclass=NullPool) if self.shared else None
        self._conn: AsyncConnection | None = None
        self._lock = asyncio.Lock()  # one statement at a time on the connection
        self._held: set[str] = set()
        self._identity: str | None = None
        self._closed = False

    def holds(self, key: str) -> bool:
        return not self.shared or key in self._held

    async def claim(self, key: str) -> bool:
        """Take the session's lane for this replica; False when another replica holds it."""
        if not self.shared or key in self._held:
            return True
        async with self._lock:
            if key in self._held:
                return True
            if self._closed:
                return False
            try:
                conn = await self._connection()
                async with asyncio.timeout(TIMEOUT_S):
                    taken = bool(await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(key)}))
            except (OSError, TimeoutError, Exception) as exc:  # the server is away: not ours
                log.warning("lane.claim_failed", extra={"session": key, "error": type(exc).__name__})
                await self._lost()
                return False
            if taken:
                self._held.add(key)
            return taken

    async def release(self, key: str) -> None:
        """Let go of the session's lane (its queue is empty here)."""
        if not self.shared or key not in self._held:
            return
        self._held.discard(key)  # at once: a claim waiting for the connection locks anew
        async with self._lock:
            if self._conn is None:
                return
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    await self._conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": _key(key)})
            except Exception as exc:
                log.warning("lane.release_failed", extra={"session": key, "error": type(exc).__name__})
                await self._lost()

    async def identity(self) -> str | None:
        """This replica's name while it lives: a fresh one locked on the lane connection (a
        new one after that connection was lost, when others may have taken the old one's
        rows). None on SQLite, or when the server is away."""
        if not self.shared or self._identity is not None:
            return self._identity
        async with self._lock:
            if self._identity is None and not self._closed:
                name = uuid.uuid4().hex
                if await self._try_lock(replica_lock_key(name)):
                    self._identity = name
            return self._identity

    async def alive(self, replica: str) -> bool:
        """Whether the replica that named itself `replica` still lives (holds its lock);
        True when that cannot be told (the server is away): its rows are left alone."""
        if not self.shared or replica == self._identity:
            return True
        key = replica_lock_key(replica)
        async with self._lock:
            if self._closed or not await self._try_lock(key):
                return True
            with contextlib.suppress(Exception):  # the lock goes with the connection anyway
                assert self._conn is not None
                async with asyncio.timeout(TIMEOUT_S):
                    await self._conn.scalar(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            return False

    async def _try_lock(self, key: int) -> bool:
        """`pg_try_advisory_lock` on the lane connection (the caller holds `_lock`)."""
        try:
            conn = await self._connection()
            async with asyncio.timeout(TIMEOUT_S):
                return bool(await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}))
        except Exception as exc:  # the server is away
            log.warning("lane.lock_failed", extra={"error": type(exc).__name__})
            await self._lost()
            return False

    async def _connection(self) -> AsyncConnection:
        if self._conn is None:
            assert self._engine is not None
            async with asyncio.timeout(TIMEOUT_S):
                conn = await self._engine.connect()
            self._conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    async def _lost(self) -> None:
        """The connection failed: the server released every lock on it."""
        conn, self._conn = self._conn, None
        self._held.clear()
        self._identity = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()

    async def release_lanes(self) -> None:
        """Shutting down: every lane goes to the other replicas now and none is claimed any
        more, while the identity stays locked until `aclose` — the rows this replica still
        stores until its adapters close are its own to route, never a dead replica's."""
        async with self._lock:
            self._closed = True
            keys, self._held = [_key(k) for k in self._held], set()
            if self._conn is None or not keys:
                return
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    await self._conn.execute(_UNLOCK_MANY, {"keys": keys})
            except Exception as exc:  # the server is away: the locks went with the connection
                log.warning("lane.release_failed", extra={"error": type(exc).__name__})
                await self._lost()

    async def aclose(self) -> None:
        """Every lane goes to the other replicas at once (the session ends)."""
        async with self._lock:
            self._closed = True
            self._held.clear()
            self._identity = None
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        if self._engine is not None:
            await self._engine.dispose()


_UNLOCK_MANY = text("SELECT pg_advisory_unlock(k) FROM unnest(CAST(:keys AS bigint[])) AS k")


def _key(session_key: str) -> int:
    return advisory_key(f"lane:{session_key}")


def replica_lock_key(name: str) -> int:
    """The advisory lock a live replica named `name` holds (`LaneClaims.identity`)."""
    return advisory_key(f"replica:{name}")
