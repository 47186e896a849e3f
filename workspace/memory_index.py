"""Full-text index of MEMORY.md and the daily logs (memory/**.md) in the database.

SQLite uses FTS5, PostgreSQL a tsvector with a GIN index (DDL in `memory_schema`). Files
are cut into ~1,600-character chunks on line boundaries. `sync()` is incremental and
restart-proof: `memory_files` keeps path, mtime, size and sha256; a file is hashed only when
its mtime or size changed and re-chunked only when its hash changed; vanished files are
dropped. Every chunk carries an *owner* (`search_owner`) so a search can only ever see the
files of its own scope.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from workspace.access import check_session, is_main
from workspace.daily_log import log_dir_for
from workspace.memory_files import (
    LONG_TERM_FILE,
    MAIN_OWNER,
    Prepared,
    day_ord,
    index_order,
    owner_of,
    prepare_files,
    scan_files,
)
from workspace.memory_schema import create_memory_tables, owner_tag
from workspace.memory_search import CANDIDATE_WINDOW, MemoryHit, run_search

BATCH_FILES = 200
ANALYZE_AFTER_FILES = 200
log = logging.getLogger(__name__)
_PG_LOCK_KEY = 0x526F6F73_4D656D  # "Roos" "Mem": serialises writers across processes

__all__ = [
    "MemoryHit",
    "MemoryIndex",
    "SyncStats",
    "create_memory_tables",
    "reindex_memory",
    "search_owner",
]


@dataclass(slots=True)
class SyncStats:
    scanned: int = 0
    unchanged: int = 0
    hashed: int = 0
    """Files whose mtime or size changed, so they were read and hashed."""
    indexed: int = 0
    """Files (re-)chunked because they are new or their content changed."""
    removed: int = 0
    chunks: int = 0


def search_owner(session_key: str, scope: str) -> str:
    """The only owner a session's search may read: main → MEMORY.md + main logs; a sub
    session → its own log directory."""
    check_session(session_key, scope)
    return MAIN_OWNER if is_main(scope) else log_dir_for(session_key).as_posix()


class MemoryIndex:
    """Search over one workspace's memory files, stored through an `AsyncEngine`.

    The tables must exist (migration 0002, or `create_memory_tables`). One instance per
    workspace and process; its lock keeps concurrent syncs of this process from overlapping,
    and on PostgreSQL an advisory lock does the same across processes.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        root: Path,
        *,
        today: Callable[[], date] = date.today,
        clock: Callable[[], float] = time.monotonic,
        refresh_interval_s: float = 5.0,
        candidate_window: int = CANDIDATE_WINDOW,
    ) -> None:
        self._engine = engine
        self._root = root
        self._today = today
        self._clock = clock
        self._refresh_interval_s = refresh_interval_s
        self._window = candidate_window
        self._lock = asyncio.Lock()
        self._last_sync: float | None = None
        self._dirty = True
        self._long_term_seen: tuple[int, int] | None = None
        """MEMORY.md's (mtime_ns, size) at the last sync: a change syncs at once."""

    @property
    def root(self) -> Path:
        return self._root

    def mark_dirty(self) -> None:
        """A memory file was written through us: the next `refresh()` syncs."""
        self._dirty = True

    async def refresh(self) -> SyncStats | None:
        """Sync if something was written through us, MEMORY.md changed (one stat), or the
        last sync is older than the refresh interval (edits made by other means); otherwise
        do nothing and return None."""
        last = self._last_sync
        if not self._dirty and last is not None:
            fresh = self._clock() - last < self._refresh_interval_s
            if fresh and self._long_term_stat() == self._long_term_seen:
                return None
        return await self.sync()

    def _long_term_stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._root / LONG_TERM_FILE)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    async def sync(self) -> SyncStats:
        """Bring the index in line with the files on disk; see the module docstring."""
        async with self._lock:
            return await self._locked_sync()

    async def _locked_sync(self) -> SyncStats:
        self._dirty = False
        started = self._clock()
        try:
            stats = await self._sync()
        except BaseException:
            self._dirty = True  # retried by the next refresh()
            raise
        self._last_sync = started
        return stats

    async def reindex(self) -> SyncStats:
        """Forget everything indexed and index all files again."""
        async with self._lock:
            async with self._engine.begin() as conn:
                await self._writer_lock(conn)
                await conn.execute(text("DELETE FROM memory_chunks"))
                await conn.execute(text("DELETE FROM memory_files"))
            return await self._locked_sync()

    async def search(
        self, query: str, session_key: str, scope: str, *, limit: int = 8
    ) -> list[MemoryHit]:
        """Best chunks for `query` among the files this session's scope may see (see
        `search_owner`), best first. Does not sync; call `refresh()` first if needed."""
        owner = search_owner(session_key, scope)
        async with self._engine.connect() as conn:
            return await run_search(
                conn,
                query,
                owner=owner,
                today_ord=self._today().toordinal(),
                limit=limit,
                window=self._window,
            )

    async def _sync(self) -> SyncStats:
        on_disk = await asyncio.to_thread(scan_files, self._root)
        self._long_term_seen = on_disk.get(LONG_TERM_FILE)
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(text("SELECT path, mtime_ns, size, sha256 FROM memory_files"))
            ).all()
        known = {r[0]: (int(r[1]), int(r[2]), str(r[3])) for r in rows}
        stats = SyncStats(scanned=len(on_disk))
        # Oldest first, MEMORY.md last: new chunk ids then follow recency, which the
        # newest-first candidate window of the search relies on.
        changed = sorted(
            (p for p, st in on_disk.items() if known.get(p, (0, 0, ""))[:2] != st),
            key=index_order,
        )
        stats.unchanged = len(on_disk) - len(changed)
        gone = [p for p in known if p not in on_disk]
        hashes = {p: known[p][2] for p in changed if p in known}
        for i in range(0, len(changed), BATCH_FILES):
            batch = changed[i : i + BATCH_FILES]
            prepared = await asyncio.to_thread(prepare_files, self._root, batch, hashes)
            vanished = await self._apply(prepared, stats)
            gone.extend(p for p in vanished if p in known)
        if gone:
            async with self._engine.begin() as conn:
                await self._writer_lock(conn)
                for path in gone:
                    await conn.execute(text("DELETE FROM memory_chunks WHERE path = :p"), {"p": path})
                    await conn.execute(text("DELETE FROM memory_files WHERE path = :p"), {"p": path})
            stats.removed = len(gone)
        if stats.indexed or stats.removed:
            await self._tidy(bulk=stats.indexed + stats.removed >= ANALYZE_AFTER_FILES)
        return stats

    async def _tidy(self, *, bulk: bool) -> None:
        """PostgreSQL only: merge the GIN pending list (every search scans it linearly until
        then) and, after a bulk change, refresh planner statistics."""
        if self._engine.dialect.name != "postgresql":
            return
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    text("SELECT gin_clean_pending_list('ix_memory_chunks_tsv'::regclass)")
                )
                if bulk:
                    await conn.execute(text("ANALYZE memory_chunks"))
                    await conn.execute(text("ANALYZE memory_files"))
        except DBAPIError as exc:  # e.g. not the index owner: searches are slower, not wrong
            log.warning("memory_index.tidy_failed error=%s", exc)

    async def _apply(self, prepared: list[Prepared | str], stats: SyncStats) -> list[str]:
        """Write one batch in one transaction; returns the paths that vanished meanwhile."""
        vanished: list[str] = []
        async with self._engine.begin() as conn:
            await self._writer_lock(conn)
            for item in prepared:
                if isinstance(item, str):
                    vanished.append(item)
                    continue
                stats.hashed += 1
                if item.chunks is None:  # same content, new mtime/size
                    await conn.execute(
                        text("UPDATE memory_files SET mtime_ns = :m, size = :s WHERE path = :p"),
                        {"m": item.mtime_ns, "s": item.size, "p": item.path},
                    )
                    continue
                await self._write_file(conn, item)
                stats.indexed += 1
                stats.chunks += len(item.chunks)
        return vanished

    async def _write_file(self, conn: AsyncConnection, item: Prepared) -> None:
        assert item.chunks is not None
        owner = owner_of(item.path)
        tag = owner_tag(owner)
        age_anchor = day_ord(item.path, item.mtime_ns)
        await conn.execute(text("DELETE FROM memory_chunks WHERE path = :p"), {"p": item.path})
        await conn.execute(text("DELETE FROM memory_files WHERE path = :p"), {"p": item.path})
        if item.chunks:
            await conn.execute(
                text(
                    "INSERT INTO memory_chunks (path, owner, owner_tag, day_ord, start_line,"
                    " end_line, body) VALUES (:p, :o, :t, :d, :s, :e, :b)"
                ),
                [
                    {"p": item.path, "o": owner, "t": tag, "d": age_anchor, "s": c.start_line,
                     "e": c.end_line, "b": c.body}
                    for c in item.chunks
                ],
            )
        await conn.execute(
            text(
                "INSERT INTO memory_files (path, owner, mtime_ns, size, sha256, day_ord,"
                " chunk_count) VALUES (:p, :o, :m, :s, :h, :d, :n)"
            ),
            {"p": item.path, "o": owner, "m": item.mtime_ns, "s": item.size,
             "h": item.sha256, "d": age_anchor, "n": len(item.chunks)},
        )

    @staticmethod
    async def _writer_lock(conn: AsyncConnection) -> None:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


async def reindex_memory(engine: AsyncEngine, root: Path) -> int:
    """Rebuild the whole index of `root` (CLI: `roost memory reindex`); returns the number
    of files indexed."""
    stats = await MemoryIndex(engine, root).reindex()
    return stats.indexed
