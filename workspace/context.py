"""The workspace part of the system prompt, built per scope (DESIGN.md, Context by scope).

`stable` depends only on file contents and the date, never on the time of day, so the same
files on the same day give byte-identical text (prompt caching); `volatile` carries the
clock and today's log. Caps: 20,000 characters per file, 4,000 for USER.md, 60,000 in total;
every cut leaves a visible notice in the text.

Every file is read through `workspace.access` exactly as the file tools would read it for this
session: a sub scope gets only allow-listed files (identity files, skills, its own log), and
a symlink or hard link that leads elsewhere is skipped in every scope. Reads are bounded (a
huge file costs at most `READ_LIMIT` bytes), since this runs on the event loop. The serving
process passes a `ReadCache` (workspace/read_cache.py): unchanged files then cost a few lstat
calls, and every refusal is decided again by the same checks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Literal

from workspace.access import Access, AccessDenied, confine, is_main, open_regular, readable
from workspace.daily_log import log_dir_for, session_dir_for
from workspace.read_cache import Missing, ReadCache, folder_snapshot, snapshot
from workspace.skills import SKILL_FILE, SKILLS_DIR, list_skills, skills_prompt

FILE_CAP = 20_000
USER_CAP = 4_000
TOTAL_CAP = 60_000
READ_LIMIT = 4 * FILE_CAP
"""Bytes read from one file at most: FILE_CAP characters of UTF-8 always fit."""

SHARED_FILES: tuple[str, ...] = ("SOUL.md", "IDENTITY.md", "AGENTS.md")
MAIN_ONLY_FILES: tuple[str, ...] = ("USER.md", "MEMORY.md")
_CAPS = {"USER.md": USER_CAP}


@dataclass(frozen=True, slots=True)
class PromptContext:
    stable: str
    """Identity files, skills list, (main) USER/MEMORY and yesterday's log. No clock."""
    volatile: str
    """Current date and time, and this session's log of today."""


@dataclass(slots=True)
class _Budget:
    left: int = TOTAL_CAP


def build_context(
    root: Path,
    session_key: str,
    scope: str,
    now: datetime,
    extra_roots: tuple[str, ...] = (),
    log_upto: int | None = None,
    cache: ReadCache[_Text] | None = None,
) -> PromptContext:
    """Assemble the prompt context a session may see; missing or empty files are skipped.

    main: SOUL, IDENTITY, AGENTS, USER, MEMORY, skills, yesterday's log (stable) + now and
    today's log (volatile). sub: SOUL, IDENTITY, AGENTS, which files it can see (its own
    folder, logs and `extra_roots`), skills (stable) + now and its own log of today
    (volatile); never USER.md, MEMORY.md, another session's log or a file off the allow-list.
    `scope` is an `agent_core.risk.Scope` (or its value); a sub scope with the main key
    raises ValueError.

    `log_upto`: today's log as its first `log_upto` bytes, what it held when the conversation
    began (`LogCutoffs`): the runs since then are in the conversation sent, so the log does
    not grow with every run and is not re-sent uncached on every request.

    `cache`: reuse what earlier calls read while the files are unchanged (one `ReadCache`
    per serving process); the text is the same as without it.
    """
    access = _access(session_key, str(getattr(scope, "value", scope)), tuple(extra_roots))
    main = is_main(scope)
    real_root = os.path.realpath(root)
    budget = _Budget()
    today = now.date()

    stable: list[str] = []
    names = SHARED_FILES + (MAIN_ONLY_FILES if main else ())
    for name in names:
        text = _read(root, name, access, "head", real_root, cache=cache)
        if text is not None:
            stable.append(_section(name, text, _CAPS.get(name, FILE_CAP), budget, keep="head"))
    if not main:
        files = _sub_files(access)
        stable.append(_section("Files this chat can see", files, FILE_CAP, budget, "head"))
    skills = _skills(root, access, real_root, cache)
    if skills:
        stable.append(_section("Skills (load_skill to use one)", skills, FILE_CAP, budget, "head"))
    if main:
        yesterday = _log_rel(session_key, today - timedelta(days=1))
        text = _read(root, yesterday, access, "tail", real_root, cache=cache)
        if text is not None:
            title = f"Yesterday's log ({yesterday})"
            stable.append(_section(title, text, FILE_CAP, budget, keep="tail"))

    volatile = [f"## Now\n{_clock(now)}"]
    today_log = _log_rel(session_key, today)
    text = _read(root, today_log, access, "tail", real_root, log_upto, cache)
    if text is not None:
        title = f"Today's log ({today_log})"
        volatile.append(_section(title, text, FILE_CAP, budget, keep="tail"))
    return PromptContext(stable="\n\n".join(stable), volatile="\n\n".join(volatile))


class LogCutoffs:
    """Per session, how long today's log was when its conversation began: at the first
    context built for it today (in this process) or since its /new. The entries appended
    since then are the runs of this conversation, which is sent anyway; without them the log
    stays byte-identical while the session talks (bench/bench_cache.py). After /new
    (`forget`) the whole log is shown again: the new conversation holds none of it. A restart
    starts over with the whole log (repeated, never lost); so does a log rewritten shorter.
    Bytes, not clock times: entries are stamped to the second, and runs that close in the
    second /new was sent would otherwise vanish from both."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._since: dict[str, tuple[date, int]] = {}

    def cutoff(self, session_key: str, now: datetime) -> int:
        """Bytes of the session's log of `now`'s day to show (see `build_context`)."""
        try:
            size = os.stat(os.path.join(self._root, _log_rel(session_key, now.date()))).st_size
        except (OSError, ValueError):
            size = 0
        since = self._since.get(session_key)
        if since is None or since[0] != now.date() or since[1] > size:
            since = self._since[session_key] = (now.date(), size)
        return since[1]

    def forget(self, session_key: str) -> None:
        self._since.pop(session_key, None)


@dataclass(frozen=True, slots=True)
class _Text:
    text: str
    size: int | None = None
    """File size in bytes when only part of the file was read (None: `text` is all of it)."""

    def __bool__(self) -> bool:
        return bool(self.text)


@functools.lru_cache(maxsize=1024)
def _sub_files(access: Access) -> str:
    """The allow-list in words, so the model looks where it may (stable: no clock, no I/O)."""
    own = session_dir_for(access.session_key)
    lines = [
        "- SOUL.md, IDENTITY.md, AGENTS.md and skills/: read-only",
        f"- {own.as_posix()}/: this chat's own folder (created by the first file written there)",
        f"- {log_dir_for(access.session_key).as_posix()}/: this chat's daily logs, read-only",
    ]
    lines += [f"- {root}/: shared with this chat by the owner" for root in access.shared_roots()]
    lines.append("Nothing else in the workspace exists in this chat; do not look for it.")
    return "\n".join(lines)


def _section(
    title: str, content: _Text | str, cap: int, budget: _Budget, keep: Literal["head", "tail"]
) -> str:
    """`## title` + text, cut to min(cap, what the total budget has left) with a notice."""
    text = content.text if isinstance(content, _Text) else content
    partial = content.size if isinstance(content, _Text) else None
    limit = min(cap, budget.left)
    if limit <= 0:
        return f"## {title}\n[omitted: the {TOTAL_CAP:,}-character context cap is reached]"
    if len(text) <= limit and partial is None:
        budget.left -= len(text)
        return f"## {title}\n{text}"
    limit = min(limit, len(text))
    budget.left -= limit
    reason = (
        f"the {cap:,}-character limit for this file"
        if limit == cap
        else f"the {TOTAL_CAP:,}-character context cap"
    )
    whole = f"{len(text):,} characters" if partial is None else f"{partial:,} bytes"
    if keep == "tail":
        shown = text[-limit:]
        note = (
            f"[truncated: showing the last {limit:,} of {whole} "
            f"({reason}); read the file for the rest]"
        )
        return f"## {title}\n{note}\n{shown}"
    shown = text[:limit]
    note = (
        f"[truncated: showing the first {limit:,} of {whole} "
        f"({reason}); read the file for the rest]"
    )
    return f"## {title}\n{shown}\n{note}"


def _read(
    root: Path,
    rel: str,
    access: Access,
    keep: Literal["head", "tail"],
    real_root: str,
    upto: int | None = None,
    cache: ReadCache[_Text] | None = None,
) -> _Text | None:
    """The file as this session may read it (None if missing, empty or not allowed), at most
    READ_LIMIT bytes from its head or tail; with `upto`, as if it ended after that many bytes
    (a note says the rest is in the conversation).

    With a `cache`: a text the slow path gave this access before is served again while the
    file and every folder on the way are unchanged and free of symlinks (workspace.read_cache);
    a file it may read but whose text cannot be kept (racy: today's log, just appended) is
    opened without `confine` while the folders on the way are unchanged and free of symlinks
    and the descriptor opened is the file lstat saw; a missing path is None at the cost of
    the lstat that found it missing. Everything else, and every refusal, goes through the
    slow path (`_read_checked`)."""
    if upto == 0:
        # Shown as ending before its first byte: nothing, whatever the file holds or whoever
        # asks (every path below gives None). Today's log of a conversation that began
        # before the log did, the common case: no lstat, no open.
        return None
    if cache is None:
        return _read_checked(root, rel, access, keep, real_root, upto)[0]
    now = cache.now()  # before the lstat: a change after it is stamped later than this
    try:
        snap = snapshot(real_root, rel)
    except Missing:
        return None  # the slow path would fail to open it as well
    if snap is None:  # a symlink, a hard link or an odd name: the slow path decides
        return _read_checked(root, rel, access, keep, real_root, upto)[0]
    key = (real_root, rel, keep, upto)
    reader = _reader(access, rel)
    hit = cache.get(key, reader, snap)
    if hit is not None:
        return hit
    text: _Text | None = None
    st: os.stat_result | None = None
    if cache.approved((real_root, rel), reader, snap):
        text, st = _read_open(Path(real_root, rel), PurePosixPath(rel), keep, upto)
        if st is None or not snap.same_file(st):  # it changed since lstat: decide afresh
            text = st = None
    if st is None:
        text, st, checked = _read_checked(root, rel, access, keep, real_root, upto)
        if text is None or st is None or checked != rel or not snap.same_file(st):
            return text
        cache.approve((real_root, rel), reader, snap)
    if text is None or cache.racy(snap, now):
        return text  # today's log, just appended: not stored, so no need to look again
    try:
        unchanged = snapshot(real_root, rel) == snap  # nothing moved while it was read
    except Missing:
        unchanged = False
    if unchanged:
        cache.put(key, reader, snap, text, len(text.text), now)
    return text


_ALLOWED = "allowed"
"""The reader of a file every access that `allows` it shares (see `_reader`)."""


def _reader(access: Access, rel: str) -> Hashable:
    """Whom the cache's answers for `rel` are given to. The cache serves only a path with no
    symlink on the way and a one-link file, where `confine`'s decision is `access.allows` on
    that very path and the bytes do not depend on who asks: every access that allows it
    shares one entry (a new chat's first prompt costs lstat calls, not the slow path). Any
    other access is its own reader, which the slow path never approved."""
    return _ALLOWED if _allows(access, rel) else access


@functools.lru_cache(maxsize=4096)
def _allows(access: Access, rel: str) -> bool:
    return access.allows(PurePosixPath(rel), "read")


def _read_checked(
    root: Path,
    rel: str,
    access: Access,
    keep: Literal["head", "tail"],
    real_root: str,
    upto: int | None = None,
) -> tuple[_Text | None, os.stat_result | None, str | None]:
    """The slow path: confine + open_regular, every time. Also returns the fstat of what was
    read and the workspace-relative path confine resolved it to (for the cache's checks)."""
    try:
        real, checked = confine(root, rel, access, "read", real_root=real_root)
    except (AccessDenied, OSError):
        return None, None, None
    text, st = _read_open(real, checked, keep, upto)
    return text, st, checked.as_posix()


def _read_open(
    real: Path, checked: PurePosixPath, keep: Literal["head", "tail"], upto: int | None
) -> tuple[_Text | None, os.stat_result | None]:
    """Read a confined file through `open_regular` (no symlink, one link, checked on the
    descriptor); also returns the descriptor's fstat."""
    try:
        with open_regular(real, checked) as fh:
            st = os.fstat(fh.fileno())
            whole = st.st_size
            size = whole if upto is None else min(whole, upto)
            if size > READ_LIMIT and keep == "tail":
                fh.seek(size - READ_LIMIT)
            raw = fh.read(min(READ_LIMIT, size - fh.tell()))
    except (AccessDenied, OSError):
        return None, None
    text = raw.decode("utf-8", errors="replace")
    partial = size if size > len(raw) else None
    if partial is not None and keep == "tail":
        text = text.partition("\n")[2]  # drop the line the seek cut into
    text = text.strip("\n").rstrip()
    if whole > size and text:
        text += "\n[later entries are about this conversation; read the file for them]"
    return (_Text(text, partial) if text else None), st


def _skills(
    root: Path, access: Access, real_root: str, cache: ReadCache[_Text] | None = None
) -> str:
    """The skills this session may load, one line each ("" for none). With a `cache`, the
    listing is reused (per access) while lstat says nothing in skills/ changed."""
    if cache is None:
        return _skills_checked(root, access, real_root)
    now = cache.now()
    try:
        snap = folder_snapshot(real_root, SKILLS_DIR, SKILL_FILE)
    except Missing:
        return ""  # no skills/ folder: list_skills finds nothing either
    if snap is None:
        return _skills_checked(root, access, real_root)
    # The listing depends on the access only through `readable` per skill, which with no
    # symlink anywhere in the folder is `allows` per SKILL.md: accesses that decide alike
    # share one listing (as files share one text, see `_reader`).
    decisions = tuple(
        _allows(access, f"{SKILLS_DIR}/{name}/{SKILL_FILE}") for name, _, file in snap.entries if file is not None
    )
    key = (real_root, SKILLS_DIR, decisions)
    hit = cache.get(key, decisions, snap)
    if hit is not None:
        return hit.text
    text = _skills_checked(root, access, real_root)
    if folder_snapshot(real_root, SKILLS_DIR, SKILL_FILE) == snap:
        cache.put(key, decisions, snap, _Text(text), len(text), now)
    return text


def _skills_checked(root: Path, access: Access, real_root: str) -> str:
    """The slow path: list_skills, and for a sub scope `readable` (confine) per skill."""
    main = access.main
    return skills_prompt(
        [s for s in list_skills(root) if main or readable(root, s.path, access, real_root=real_root)]
    )


@functools.lru_cache(maxsize=1024)
def _access(session_key: str, scope: str, extra_roots: tuple[str, ...]) -> Access:
    """One Access per identity: its checks run once (a refused pair raises every time)."""
    return Access(session_key, scope, extra_roots)


def _log_rel(session_key: str, day: date) -> str:
    """`daily_log.log_path(root, session_key, day)` relative to the root, without pathlib."""
    return f"{_log_dir(session_key)}/{day.isoformat()}.md"


@functools.lru_cache(maxsize=1024)
def _log_dir(session_key: str) -> str:
    return log_dir_for(session_key).as_posix()


def _clock(now: datetime) -> str:
    text = f"Current date and time: {now:%A, %Y-%m-%d %H:%M}"
    if now.tzinfo is not None:
        offset = now.strftime("%z")
        text += f" (UTC{offset[:3]}:{offset[3:]})" if offset else ""
    return text
