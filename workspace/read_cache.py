"""Answers of the context builder's file reads, reused while a few lstat calls say nothing
changed (workspace/context.py; built for every run, so it must be cheap).

The slow path (`workspace.access.confine` + `open_regular`: a realpath walk, the access
rules, the hard-link check, open, fstat, read) decides; this cache only remembers a text the
slow path produced, for the accesses it produced it for (the context builder names readers
instead: every access that `allows` the path is one reader, see `workspace.context._reader`),
and serves it again only while:

- every directory between the real workspace root and the file is a real directory (lstat:
  not a symlink) with the same inode, mode, mtime and ctime as when the entry was filled;
- the file itself is a regular file with one link (lstat: not a symlink) with the same
  inode, device, mode, link count, size, mtime and ctime.

With no symlink on the way the file's real path is the path asked for, so `confine` would
take the same decision (the rules depend only on that path and the `Access`), the hard-link
check the same answer, and the bytes are the ones read. Anything else (a symlink swapped in
for the file or a folder, a hard link added, an edit, a replaced file) fails the check and
goes through the slow path again; a refusal is never stored, so it is decided afresh every
time.

Racy files (as git's "racily clean" index entries): file timestamps come from a coarse clock
(a few ms; a second on some file systems; kernels with multigrain timestamps stamp each
change apart, older ones do not), so a file written in the same tick as the fill and again
right after could keep its size, mtime and ctime. A file modified within `racy_ns` (2 s) of
the clock is therefore never stored; once it is older, any later write stamps a visibly newer
time.

Approvals, for racy files (today's log, appended after every run): the slow path's "yes" for
(file, access) is remembered with the folders on the way. While lstat shows those folders
unchanged and the file a regular one-link file (not a symlink), the caller may open it
without `confine` (still through `open_regular`), provided the descriptor's fstat is the file
lstat saw; if not, the slow path decides again.
"""

from __future__ import annotations

import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

RACY_NS = 2_000_000_000
"""A file changed less than this long ago (by its mtime or ctime) is never stored."""
CAPACITY = 512
"""Entries remembered at most (least recently used first out): files, and one skills
listing per session."""
CHAR_BUDGET = 2_000_000
"""Characters of text remembered at most, over all entries."""
MAX_ACCESSES = 1024
"""Accesses remembered per entry; beyond this the set starts over (they are re-approved)."""

_DirSig = tuple[int, int, int, int, int]
"""st_ino, st_dev, st_mode, st_mtime_ns, st_ctime_ns of a directory on the way."""
_FileSig = tuple[int, int, int, int, int, int, int]
"""st_ino, st_dev, st_mode, st_nlink, st_size, st_mtime_ns, st_ctime_ns of the file."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What lstat says about the way to a file and the file itself."""

    dirs: tuple[_DirSig, ...]
    file: _FileSig

    def same_file(self, st: os.stat_result) -> bool:
        """Is `st` (an fstat of the descriptor the slow path read) this very file, unchanged?"""
        return _file_sig(st) == self.file

    def newest_ns(self) -> int:
        """The file's latest change by its timestamps (the racy rule looks at this)."""
        return max(self.file[5], self.file[6])


@dataclass(frozen=True, slots=True)
class FolderSnapshot:
    """What lstat says about a folder of one-file entries (`skills/<name>/SKILL.md`): the
    folder, each entry, and each entry's file (None where it has none)."""

    folder: _DirSig
    entries: tuple[tuple[str, _DirSig, _FileSig | None], ...]

    def newest_ns(self) -> int:
        """Any change in the folder counts: an entry added in the tick of the fill would not
        move the folder's mtime."""
        times = [self.folder[3], self.folder[4]]
        for _, entry, file in self.entries:
            times += [entry[3], entry[4]]
            if file is not None:
                times += [file[5], file[6]]
        return max(times)


class _Snap(Protocol):
    def newest_ns(self) -> int: ...


class Missing(Exception):
    """The path does not exist (a folder on the way or the file): the slow path would read
    nothing either."""


def snapshot(real_root: str, rel: str) -> Snapshot | None:
    """The lstat signature of `rel` under `real_root` (which must already be a real path),
    or None when it may not be served from a cache: a symlink or a non-directory on the way,
    a final component that is not a regular file with one link, or a name that is not plain
    (empty, `.`, `..`, `~…`). Raises `Missing` when a component does not exist."""
    parts = rel.split("/")
    if not parts[0] or parts[0].startswith("~") or any(p in ("", ".", "..") for p in parts):
        return None
    path = real_root
    dirs: list[_DirSig] = []
    try:
        for part in parts[:-1]:
            path = f"{path}/{part}"
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):  # a symlink (or a file) on the way
                return None
            dirs.append(_dir_sig(st))
        st = os.lstat(f"{path}/{parts[-1]}")
    except (FileNotFoundError, NotADirectoryError):
        raise Missing(rel) from None
    except OSError:
        return None  # permissions, a loop, a long name: let the slow path say what it is
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return None
    return Snapshot(tuple(dirs), _file_sig(st))


def folder_snapshot(real_root: str, folder: str, file_name: str) -> FolderSnapshot | None:
    """The lstat signature of `folder` (a plain name under `real_root`), of every entry in it
    and of `<entry>/<file_name>`; None when it may not be served from a cache (a symlink
    anywhere, the file not a regular one-link file, an error). Raises `Missing` when the
    folder does not exist. One listdir plus lstat calls: two per entry."""
    path = f"{real_root}/{folder}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Missing(folder) from None
    except OSError:
        return None
    try:
        if not stat.S_ISDIR(st.st_mode):
            return None
        names = sorted(os.listdir(path))
        entries: list[tuple[str, _DirSig, _FileSig | None]] = []
        for name in names:
            est = os.lstat(f"{path}/{name}")
            if stat.S_ISLNK(est.st_mode):
                return None
            file: _FileSig | None = None
            if stat.S_ISDIR(est.st_mode):
                try:
                    fst = os.lstat(f"{path}/{name}/{file_name}")
                except FileNotFoundError:
                    fst = None
                if fst is not None:
                    if not stat.S_ISREG(fst.st_mode) or fst.st_nlink != 1:
                        return None
                    file = _file_sig(fst)
            entries.append((name, _dir_sig(est), file))
    except OSError:
        return None
    return FolderSnapshot(_dir_sig(st), tuple(entries))


def _dir_sig(st: os.stat_result) -> _DirSig:
    return (st.st_ino, st.st_dev, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)


def _file_sig(st: os.stat_result) -> _FileSig:
    return (
        st.st_ino, st.st_dev, st.st_mode, st.st_nlink, st.st_size, st.st_mtime_ns, st.st_ctime_ns
    )


@dataclass(slots=True)
class _Entry(Generic[T]):
    snap: _Snap
    value: T
    chars: int
    accesses: set[Hashable] = field(default_factory=set)
    """The accesses the slow path gave `value` to, for this very snapshot."""


class ReadCache(Generic[T]):
    """LRU of texts read from workspace files, keyed by (real root, relative path, how it
    was read); each entry also names the accesses the slow path approved it for. One per
    serving process (bot/app.py), shared by all sessions; not thread-safe (the event loop
    calls it)."""

    def __init__(
        self,
        *,
        clock: Callable[[], int] = time.time_ns,
        racy_ns: int = RACY_NS,
        capacity: int = CAPACITY,
        char_budget: int = CHAR_BUDGET,
    ) -> None:
        self._clock = clock
        self._racy_ns = racy_ns
        self._capacity = capacity
        self._char_budget = char_budget
        self._chars = 0
        self._entries: OrderedDict[Hashable, _Entry[T]] = OrderedDict()
        self._approvals: OrderedDict[Hashable, tuple[tuple[_DirSig, ...], set[Hashable]]] = (
            OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def now(self) -> int:
        return self._clock()

    def racy(self, snap: _Snap, now_ns: int) -> bool:
        """Changed (or stamped in the future) less than `racy_ns` before `now_ns`: `put`
        would not store it, so a caller may skip the checks that come before a `put`."""
        return now_ns - snap.newest_ns() < self._racy_ns

    def get(self, key: Hashable, access: Hashable, snap: _Snap) -> T | None:
        """The stored value if it was approved for `access` and nothing changed since."""
        entry = self._entries.get(key)
        if entry is None or access not in entry.accesses or entry.snap != snap:
            return None
        self._entries.move_to_end(key)
        return entry.value

    def put(
        self, key: Hashable, access: Hashable, snap: _Snap, value: T, chars: int, now_ns: int
    ) -> bool:
        """Remember what the slow path gave `access`, read from what `snap` describes (the
        caller checked that, and that `snap` did not change during the read). `value` must
        depend only on what `snap` covers and on `key`: other accesses approved for the same
        snapshot share it. `now_ns` is the clock just before `snap` was taken. Racy files are not
        stored (modified, or stamped in the future, less than `racy_ns` before `now_ns`).
        True if stored."""
        if self.racy(snap, now_ns) or chars > self._char_budget:
            self.discard(key)
            return False
        entry = self._entries.get(key)
        if entry is None or entry.snap != snap:
            self.discard(key)
            entry = self._entries[key] = _Entry(snap, value, chars)
            self._chars += chars
        elif len(entry.accesses) >= MAX_ACCESSES:
            entry.accesses.clear()
        entry.accesses.add(access)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity or self._chars > self._char_budget:
            self.discard(next(iter(self._entries)))
        return True

    def approved(self, key: Hashable, access: Hashable, snap: Snapshot) -> bool:
        """Did the slow path let `access` read the file at `key` (real root, relative path)
        while the folders on the way were the ones `snap` shows? `snap` (no symlink on the
        way, a regular one-link file) then leads `confine` to the same decision, whatever
        the file holds now: the caller may open the file without it, and must check that
        the descriptor it opened is `snap.file`. For files whose text cannot be stored
        (racy: today's log)."""
        approval = self._approvals.get(key)
        if approval is None or approval[0] != snap.dirs or access not in approval[1]:
            return False
        self._approvals.move_to_end(key)
        return True

    def approve(self, key: Hashable, access: Hashable, snap: Snapshot) -> None:
        """Record that the slow path let `access` read the file `snap` describes (the caller
        checked the descriptor it read against `snap`)."""
        approval = self._approvals.get(key)
        if approval is None or approval[0] != snap.dirs or len(approval[1]) >= MAX_ACCESSES:
            approval = self._approvals[key] = (snap.dirs, set())
        approval[1].add(access)
        self._approvals.move_to_end(key)
        while len(self._approvals) > self._capacity:
            self._approvals.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._chars -= entry.chars
