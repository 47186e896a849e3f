"""Per-session daily logs: where each session's `YYYY-MM-DD.md` lives and how entries are added.

Layout (relative to the workspace root), one directory per session so that scopes never mix:

    session key                         daily logs              own folder (files)
    main                                memory/                 (the whole workspace)
    group:<platform>:<chat>[:<thread>]  memory/groups/<slug>/   groups/<slug>/
    dm:<platform>:<user>                memory/dms/<slug>/      dms/<slug>/
    main:job-<id>                       memory/jobs/<slug>/     (the whole workspace)
    group:<platform>:<chat>:job-<id>    memory/groups/<slug>/   groups/<slug>/  (own, not the chat's)
    dm:<platform>:<user>:job-<id>       memory/dms/<slug>/      dms/<slug>/     (own, not the chat's)

A sub session's own folder and its logs share one slug, so they are easy to find together;
the folder sits outside `memory/` so that it is never part of memory search.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import re
import stat
from datetime import date, datetime
from pathlib import Path

MAIN_KEY = "main"
MEMORY_DIR = "memory"
ENTRY_FIELD_CHARS = 300
"""`append_run_entry` trims what was asked and what was done to about this many characters."""

_SAFE = re.compile(r"[a-z0-9-]")
_MAX_SLUG = 80


@functools.lru_cache(maxsize=4096)
def log_dir_for(session_key: str) -> Path:
    """Directory of a session's daily logs, relative to the workspace root.

    Raises ValueError for a key that is not `main`, `group:<platform>:<chat>[:<thread>]` or
    `dm:<platform>:<user>` (empty parts are rejected too). Cached: every run appends to its
    log and the context reads it, and the slug costs more than the append.
    """
    if session_key == MAIN_KEY:
        return Path(MEMORY_DIR)
    kind, _, rest = session_key.partition(":")
    parts = rest.split(":") if rest else []
    if kind == MAIN_KEY and len(parts) == 1 and _is_job(parts[0]):  # main's isolated job
        return Path(MEMORY_DIR, "jobs", slug(rest))
    if kind == "group" and len(parts) in (2, 3) and all(parts):
        return Path(MEMORY_DIR, "groups", slug(rest))
    if kind == "dm" and (len(parts) == 2 or (len(parts) == 3 and _is_job(parts[2]))) and all(parts):
        return Path(MEMORY_DIR, "dms", slug(rest))
    raise ValueError(f"not a session key: {session_key!r}")


def _is_job(part: str) -> bool:
    """`job-<id>`: an isolated scheduled job's own session (bot.session_keys.isolated_key)."""
    return part.startswith("job-") and len(part) > 4


def session_dir_for(session_key: str) -> Path | None:
    """A sub session's own folder relative to the workspace root (`groups/<slug>` or
    `dms/<slug>`, the same slug as its logs); None for main, which owns the whole workspace.
    Raises ValueError like `log_dir_for`."""
    logs = log_dir_for(session_key)
    if session_key == MAIN_KEY or logs.parts[:2] == (MEMORY_DIR, "jobs"):  # main's jobs: main's workspace
        return None
    return Path(*logs.parts[1:])


def slug(value: str) -> str:
    """Deterministic, filename-safe and injective name for `value`.

    Lower-case ASCII letters, digits and '-' are kept, ':' becomes '_'. If anything else had
    to be replaced (upper case included, for case-insensitive file systems), or the result is
    long, a short hash of the original is appended so two keys never share a directory.
    """
    out: list[str] = []
    lossy = False
    for ch in value:
        if _SAFE.fullmatch(ch):
            out.append(ch)
        elif ch == ":":
            out.append("_")
        elif "A" <= ch <= "Z":
            out.append(ch.lower())
            lossy = True
        else:
            out.append("x")
            lossy = True
    text = "".join(out)
    if lossy or len(text) > _MAX_SLUG:
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:10]
        text = f"{text[:_MAX_SLUG]}-{digest}"
    return text


def log_path(root: Path, session_key: str, day: date) -> Path:
    """`<root>/<log dir>/YYYY-MM-DD.md` for the session and day (may not exist yet)."""
    return root / log_dir_for(session_key) / f"{day.isoformat()}.md"


def append_entry(root: Path, session_key: str, now: datetime, text: str) -> Path:
    """Append a timestamped markdown entry to the session's log of `now`'s date.

    Creates directories and the file (with a date heading) as needed; returns the log path.
    The day and time are taken from `now` as given (pass an aware local time).
    """
    path = log_path(root, session_key, now.date())
    body = text.strip() or "(empty)"
    entry = f"\n### {now:%H:%M:%S}\n{body}\n".encode()
    # os-level: one append per run of every chat, and a text-mode file object costs more
    # than the write. The folders are made only when the open finds them missing.
    # Never through a link: a symlink in the log's place is not followed (O_NOFOLLOW), and a
    # file with another hard link (which may be a private or outside file) is not written.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise OSError(errno.EMLINK, "the log is not one plain file (a link?); not written")
        if st.st_size == 0:
            entry = f"# {now.date().isoformat()}\n".encode() + entry
        view = memoryview(entry)
        while view:  # a regular file takes it whole unless the disk fills up
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path


def append_run_entry(
    root: Path, session_key: str, now: datetime, who: str, asked: str, did: str
) -> Path:
    """Append a short record of one run: who asked what, and what was done."""
    text = f"**{_one_line(who, 80)}** asked: {_one_line(asked)}\n**Did:** {_one_line(did)}"
    return append_entry(root, session_key, now, text)


def _one_line(text: str, limit: int = ENTRY_FIELD_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + "…"
