"""Reading memory files for the index: which files exist (scan), how they are cut (chunks),
who owns them (scope), and their content hash."""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from itertools import accumulate
from pathlib import Path

from workspace.daily_log import MEMORY_DIR

CHUNK_CHARS = 1_600
"""About 400 tokens."""
MAX_FILE_BYTES = 8 * 1024 * 1024
"""Only the first 8 MB of a (very unusual) huge memory file are indexed."""
MAIN_OWNER = "main"
LONG_TERM_FILE = "MEMORY.md"


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    body: str


@dataclass(frozen=True, slots=True)
class Prepared:
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


def chunk_lines(content: str, max_chars: int = CHUNK_CHARS) -> list[Chunk]:
    """Cut `content` into chunks of at most `max_chars` on line boundaries (a longer single
    line is split inside itself). Blank-only chunks are dropped; lines count from 1.

    Greedy: a chunk takes whole lines while they fit. The cut points are found with
    C-level sums and bisection, a few steps per chunk instead of several per line: this
    runs in a worker thread, and every Python step there holds the GIL the event loop needs."""
    lines = content.splitlines(keepends=True)
    ends = list(accumulate(map(len, lines)))  # ends[k]: characters up to the end of line k
    chunks: list[Chunk] = []

    def emit(body: str, start: int, end: int) -> None:
        body = body.replace("\x00", "")
        if body.strip():
            chunks.append(Chunk(start, end, body.rstrip("\n")))

    i = 0
    while i < len(lines):
        lead, start = "", i + 1
        if len(lines[i]) > max_chars:  # a long line: full pieces alone, its rest leads
            line = lines[i]
            cuts = range(0, len(line), max_chars)
            for k in cuts[:-1]:
                emit(line[k : k + max_chars], i + 1, i + 1)
            lead = line[cuts[-1] :]
            i += 1
        before = (ends[i - 1] if i > 0 else 0) - len(lead)
        j = bisect_right(ends, before + max_chars, lo=i)  # lines i..j-1 fit after lead
        emit(lead + "".join(lines[i:j]), start, j if j > i else start)
        i = j
    return chunks


def scan_files(root: Path) -> dict[str, tuple[int, int]]:
    """{relative posix path: (mtime_ns, size)} of MEMORY.md and memory/**/*.md; symlinks
    and hard-linked logs are skipped, so nothing outside the workspace and nothing of another
    scope is ever indexed under a session's logs (see workspace.access)."""
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
            st = entry.stat()
            if st.st_nlink == 1:  # a hard link could put MEMORY.md into a group's own logs
                yield child, st


def day_ord(rel: str, mtime_ns: int) -> int | None:
    """Age anchor of a file: the date in a log's name, else its mtime; None for MEMORY.md
    (always counts as recent)."""
    if rel == LONG_TERM_FILE:
        return None
    try:
        return date.fromisoformat(rel.rsplit("/", 1)[-1].removesuffix(".md")).toordinal()
    except ValueError:
        return datetime.fromtimestamp(mtime_ns / 1e9).date().toordinal()


def index_order(rel: str) -> tuple[int, str, str]:
    name = rel.rsplit("/", 1)[-1]
    return (rel == LONG_TERM_FILE, name, rel)


def prepare_files(
    root: Path, paths: list[str], known: dict[str, str]
) -> list[Prepared | str]:
    """Read, hash and chunk `paths` (runs in a worker thread). A path that vanished comes
    back as its bare string."""
    out: list[Prepared | str] = []
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
        out.append(Prepared(rel, before.st_mtime_ns, before.st_size, digest, chunks))
    return out
