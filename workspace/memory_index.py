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
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from workspace.access import check_session, is_main
from workspace.daily_log import MEMORY_DIR, log_dir_for
from workspace.memory_schema import create_memory_tables, owner_tag
from workspace.memory_search import CANDIDATE_WINDOW, MemoryHit, run_search

CHUNK_CHARS = 1_600
"""About 400 tokens."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""Only the first 8 MB of a (very unusual) huge memory file are indexed."""
BATCH_FILES = 200
ANALYZE_AFTER_FILES = 200
MAIN_OWNER = "main"
LONG_TERM_FILE = "MEMORY.md"
log = logging.getLogger(__name__)
_PG_LOCK_KEY = 0x526F6F73_4D656D  # "Roos" "Mem": serialises writers across processes

__all__ = ["MemoryHit", "MemoryIndex", "SyncStats", "create_memory_tables", "reindex_memory"]


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    body: str


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


@dataclass(frozen=True, slots=True)
class _Prepared:
    path: str
    mtime_ns: int
    size: int
    sha256: str
    chunks: list[Chunk] | None
    """None: content unchanged (same hash), only mtime/size need updating."""


def owner_of(rel_path: str) -> str:
    """Owner of an indexed file: "main" for MEMORY.md and memory/ outside groups/ and dms/;
    "memory/groups/<slug>" or "memory/dms/<slug>" for a session's logs."""
    parts = rel_path.split("/")
    if parts[0] == MEMORY_DIR and len(parts) >= 2 and parts[1] in ("groups", "dms"):
        return "/".join(parts[:3]) if len(parts) >= 4 else "/".join(parts[:2])
    return MAIN_OWNER


def search_owner(session_key: str, scope: str) -> str:
    """The only owner a session's search may read: main → MEMORY.md + main logs; a sub
    session → its own log directory."""
    check_session(session_key, scope)
    return MAIN_OWNER if is_main(scope) else log_dir_for(session_key).as_posix()


def chunk_lines(content: str, max_chars: int = CHUNK_CHARS) -> list[Chunk]:
    """Cut `content` into chunks of at most `max_chars` on line boundaries (a longer single
    line is split inside itself). Blank-only chunks are dropped; lines count from 1."""
    chunks: list[Chunk] = []
    buf: list[str] = []
    size = start = end = 0

    def flush() -> None:
        body = "".join(buf).replace("\x00", "")
        if body.strip():
            chunks.append(Chunk(start, end, body.rstrip("\n")))

    for number, line in enumerate(content.splitlines(keepends=True), start=1):
        pieces = [line[i : i + max_chars] for i in range(0, len(line), max_chars)] or [line]
        for piece in pieces:
            if buf and size + len(piece) > max_chars:
                flush()
                buf, size = [], 0
            if not buf:
                start = number
            buf.append(piece)
            size += len(piece)
            end = number
    if buf:
        flush()
    return chunks


def scan_files(root: Path) -> dict[str, tuple[int, int]]:
    """{relative posix path: (mtime_ns, size)} of MEMORY.md and memory/**/*.md; symlinks
    are skipped so nothing outside the workspace is ever indexed."""
    found: dict[str, tuple[int, int]] = {}
    top = root / LONG_TERM_FILE
    if top.is_file() and not top.is_symlink():
        st = top.stat()
        found[LONG_TERM_FILE] = (st.st_mtime_ns, st.st_size)
    for rel, st in _walk(root / MEMORY_DIR, MEMORY_DIR):
        found[rel] = (st.st_mtime_ns, st.st_size)
    return found


def _walk(directory: Path, rel: str) -> Iterator[tuple[str, os.stat_result]]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            continue
        child = f"{rel}/{entry.name}"
        if entry.is_dir():
            yield from _walk(Path(entry.path), child)
        elif entry.is_file() and entry.name.endswith(".md"):
            yield child, entry.stat()


def _day_ord(rel: str, mtime_ns: int) -> int | None:
    """Age anchor of a file: the date in a log's name, else its mtime; None for MEMORY.md
    (always counts as recent)."""
    if rel == LONG_TERM_FILE:
        return None
    try:
        return date.fromisoformat(rel.rsplit("/", 1)[-1].removesuffix(".md")).toordinal()
    except ValueError:
        return datetime.fromtimestamp(mtime_ns / 1e9).date().toordinal()


def _index_order(rel: str) -> tuple[int, str, str]:
    name = rel.rsplit("/", 1)[-1]
    return (rel == LONG_TERM_FILE, name, rel)


def _prepare(root: Path, paths: list[str], known: dict[str, str]) -> list[_Prepared | str]:
    """Read, hash and chunk `paths` (runs in a worker thread). A path that vanished comes
    back as its bare string."""
    out: list[_Prepared | str] = []
    for rel in paths:
        try:
            with open(root / rel, "rb") as fh:
                # Record the stat from *before* reading: if the file changes while we read,
                # the next sync sees a newer mtime/size and reads it again.
                before = os.fstat(fh.fileno())
                raw = fh.read(MAX_FILE_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            out.append(rel)
            continue
        digest = hashlib.sha256(raw).hexdigest()
        chunks = None if known.get(rel) == digest else chunk_lines(raw.decode("utf-8", "replace"))
        out.append(_Prepared(rel, before.st_mtime_ns, before.st_size, digest, chunks))
    return out


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
            self._dirty = False
            started = self._clock()
            stats = await self._sync()
            self._last_sync = started
            return stats

    async def reindex(self) -> SyncStats:
        """Forget everything indexed and index all files again."""
        async with self._lock:
            async with self._engine.begin() as conn:
                await self._writer_lock(conn)
                await conn.execute(text("DELETE FROM memory_chunks"))
                await conn.execute(text("DELETE FROM memory_files"))
            self._dirty = False
            started = self._clock()
            stats = await self._sync()
            self._last_sync = started
            return stats

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
            key=_index_order,
        )
        stats.unchanged = len(on_disk) - len(changed)
        gone = [p for p in known if p not in on_disk]
        hashes = {p: known[p][2] for p in changed if p in known}
        for i in range(0, len(changed), BATCH_FILES):
            batch = changed[i : i + BATCH_FILES]
            prepared = await asyncio.to_thread(_prepare, self._root, batch, hashes)
            async with self._engine.begin() as conn:
                await self._writer_lock(conn)
                for item in prepared:
                    if isinstance(item, str):
                        if item in known:
                            gone.append(item)
                        continue
                    stats.hashed += 1
                    if item.chunks is None:
                        await conn.execute(
                            text("UPDATE memory_files SET mtime_ns = :m, size = :s WHERE path = :p"),
                            {"m": item.mtime_ns, "s": item.size, "p": item.path},
                        )
                        continue
                    await self._write_file(conn, item)
                    stats.indexed += 1
                    stats.chunks += len(item.chunks)
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

    async def _write_file(self, conn: AsyncConnection, item: _Prepared) -> None:
        assert item.chunks is not None
        owner = owner_of(item.path)
        tag = owner_tag(owner)
        day_ord = _day_ord(item.path, item.mtime_ns)
        await conn.execute(text("DELETE FROM memory_chunks WHERE path = :p"), {"p": item.path})
        await conn.execute(text("DELETE FROM memory_files WHERE path = :p"), {"p": item.path})
        if item.chunks:
            await conn.execute(
                text(
                    "INSERT INTO memory_chunks (path, owner, owner_tag, day_ord, start_line,"
                    " end_line, body) VALUES (:p, :o, :t, :d, :s, :e, :b)"
                ),
                [
                    {"p": item.path, "o": owner, "t": tag, "d": day_ord, "s": c.start_line,
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
             "h": item.sha256, "d": day_ord, "n": len(item.chunks)},
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
