"""Which workspace paths a session may see: an allow-list for sub scopes, confinement for all.

The main scope (the owner's private chat) sees the whole workspace. A sub scope (a group, a
group topic, a paired user's DM, a job running in one of them) sees only:

    SOUL.md, IDENTITY.md, AGENTS.md          read
    skills/**                                read
    groups/<slug>/** or dms/<slug>/**        read + write   its own folder
    memory/groups/<slug>/** (dms/<slug>)     read           its own daily logs
    every extra root the owner shared        read + write

Everything else (USER.md, MEMORY.md, main's logs, notes the main session wrote, other
sessions' folders) does not exist for a sub scope. Matching is exact, as the names are on
disk, after symlinks are resolved; in addition a name that merely looks like a private one
(another case, fullwidth or Cyrillic letters, combining marks, zero-width characters) is
refused. In every scope a path outside the workspace is refused, and so is a regular file
with more than one hard link: a hard link cannot be told apart from the file it shares, which
may be a private note or a file outside the workspace (roost.toml, ~/.ssh/...).

Errors name paths relative to the workspace only; they are shown in groups.

    AccessDenied
     ├── OutsideWorkspace   the path leaves the workspace (.., absolute, symlink)
     ├── NotAvailable       the scope may not see it (or may not write it)
     └── HardLinked         a regular file with st_nlink > 1
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import BinaryIO, Literal

from workspace.daily_log import MAIN_KEY, MEMORY_DIR, log_dir_for, session_dir_for

log = logging.getLogger(__name__)

MAIN_SCOPE = "main"
SUB_SCOPE = "sub"
IDENTITY_FILES: tuple[str, ...] = ("SOUL.md", "IDENTITY.md", "AGENTS.md")
SKILLS_DIR = "skills"
PRIVATE_NAMES = frozenset({"user.md", "memory.md"})
"""Skeletons (see `skeleton`) of file names a sub scope never sees, in any folder."""
SESSION_AREAS = frozenset({MEMORY_DIR, "groups", "dms"})
"""Top-level folders owned by sessions; an extra root may not lie in them."""

Mode = Literal["read", "write", "list"]

# Latin look-alikes that NFKC leaves alone (Cyrillic, Greek, a few others), lower case only:
# `skeleton` casefolds first. Over-matching only refuses a few more names in sub scopes.
_CONFUSABLES = str.maketrans(
    {
        "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
        "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d",
        "ԛ": "q", "ԝ": "w", "ӏ": "l", "һ": "h", "ү": "y", "ɑ": "a", "ı": "i", "ȷ": "j",
        "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "m", "ν": "v",
        "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ζ": "z", "ϲ": "c", "ϳ": "j",
        "ℓ": "l", "ǀ": "l",
    }
)
_IGNORED_CATEGORIES = frozenset({"Cf", "Cc", "Mn", "Me", "Zs", "Zl", "Zp"})


class AccessDenied(Exception):
    """A path this session may not use; the message names workspace-relative paths only."""


class OutsideWorkspace(AccessDenied):
    pass


class NotAvailable(AccessDenied):
    pass


class HardLinked(AccessDenied):
    pass


def is_main(scope: str) -> bool:
    """True for the main scope. Accepts `agent_core.risk.Scope` members (a StrEnum) or their
    string values; anything else raises ValueError."""
    value = str(getattr(scope, "value", scope))
    if value == MAIN_SCOPE:
        return True
    if value == SUB_SCOPE:
        return False
    raise ValueError(f"unknown scope: {scope!r}")


def check_session(session_key: str, scope: str) -> None:
    """Reject a sub scope paired with the main session key (it would expose main's logs)."""
    if not is_main(scope) and (session_key == MAIN_KEY or session_key.startswith(f"{MAIN_KEY}:")):
        raise ValueError("the main session cannot run in the sub scope")
    log_dir_for(session_key)  # validates the key


@functools.lru_cache(maxsize=8192)
def skeleton(name: str) -> str:
    """What a name looks like: NFKC (fullwidth, ligatures, math letters → ASCII), invisible
    and combining characters and spaces dropped, case folded, Latin look-alikes mapped."""
    text = unicodedata.normalize("NFKD", name)  # decomposed: accents become marks, dropped
    text = "".join(ch for ch in text if unicodedata.category(ch) not in _IGNORED_CATEGORIES)
    return unicodedata.normalize("NFKC", text.casefold()).translate(_CONFUSABLES)


def check_extra_root(text: str) -> PurePosixPath:
    """Validate a folder the owner shares with a sub scope (`[policy]` in roost.toml).

    It must be workspace-relative, without `.`/`..`, in NFC with no invisible characters, not
    the workspace itself, not inside `memory/`, `groups/` or `dms/` (those belong to
    sessions; to share between groups use a folder such as `shared/team`), and no part of it
    may look like USER.md or MEMORY.md. Raises ValueError naming the problem.
    """
    if not text or text != text.strip():
        raise ValueError(f"extra root {text!r}: empty or padded with spaces")
    path = PurePosixPath(text)
    if path.is_absolute() or text.startswith("~") or "\\" in text:
        raise ValueError(f"extra root {text!r}: must be relative to the workspace")
    if any(part in (".", "..") for part in text.split("/")) or not path.parts:
        raise ValueError(f"extra root {text!r}: '.' and '..' are not allowed")
    for part in path.parts:
        if unicodedata.normalize("NFC", part) != part or any(
            unicodedata.category(ch) in ("Cf", "Cc") for ch in part
        ):
            raise ValueError(f"extra root {text!r}: not NFC or has invisible characters")
        if skeleton(part) in PRIVATE_NAMES:
            raise ValueError(f"extra root {text!r}: names a private file")
    if skeleton(path.parts[0]) in SESSION_AREAS:
        raise ValueError(f"extra root {text!r}: inside a session area ({path.parts[0]}/)")
    return path


@dataclass(frozen=True, slots=True)
class _Rule:
    parts: tuple[str, ...]
    """The allowed file or folder, as path parts relative to the workspace root."""
    writable: bool


@functools.lru_cache(maxsize=1024)
def _rules(session_key: str, extra_roots: tuple[str, ...]) -> tuple[_Rule, ...]:
    own = session_dir_for(session_key)
    rules = [_Rule((name,), False) for name in IDENTITY_FILES]
    rules.append(_Rule((SKILLS_DIR,), False))
    rules.append(_Rule(log_dir_for(session_key).parts, False))
    if own is not None:
        rules.append(_Rule(own.parts, True))
    for root in extra_roots:
        try:
            rules.append(_Rule(check_extra_root(root).parts, True))
        except ValueError as exc:
            log.warning("access.extra_root_ignored session=%s reason=%s", session_key, exc)
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class Access:
    """One session's view of the workspace: who it is and what the owner shared with it."""

    session_key: str
    scope: str
    extra_roots: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_session(self.session_key, self.scope)

    @property
    def main(self) -> bool:
        return is_main(self.scope)

    def shared_roots(self) -> list[str]:
        """The valid extra roots, in the order given (invalid ones are logged and ignored)."""
        own = set(_rules(self.session_key, ()))
        extra = [r for r in _rules(self.session_key, self.extra_roots) if r not in own]
        return ["/".join(r.parts) for r in extra]

    def allows(self, rel: PurePath, mode: Mode) -> bool:
        """May this session use `rel` (relative to the root, symlinks resolved) this way?
        `list` also admits the folders leading to an allowed place (the root, `groups/`…)."""
        if self.main:
            return True
        parts = tuple(p for p in rel.parts if p not in ("", "."))
        if _looks_private(parts, self.session_key):
            return False
        for rule in _rules(self.session_key, self.extra_roots):
            n = len(rule.parts)
            if parts[:n] == rule.parts:  # the allowed place itself or inside it
                return rule.writable or mode != "write"
            if mode == "list" and len(parts) < n and rule.parts[: len(parts)] == parts:
                return True  # a folder on the way to it
        return False


def _looks_private(parts: tuple[str, ...], session_key: str) -> bool:
    """A name that reads as USER.md/MEMORY.md anywhere, or a `memory/` look-alike at the top
    that is not the way to this session's own logs."""
    if any(skeleton(part) in PRIVATE_NAMES for part in parts):
        return True
    if parts and skeleton(parts[0]) == MEMORY_DIR:
        logs = log_dir_for(session_key).parts
        n = min(len(parts), len(logs))
        return parts[:n] != logs[:n]
    return False


def shown(raw: str) -> str:
    """How a path the model gave is echoed in an error: never an absolute machine path."""
    if raw.startswith(("/", "~", "\\")) or (len(raw) > 1 and raw[1] == ":"):
        return "that absolute path"
    flat = "".join(ch if ch.isprintable() else "?" for ch in raw)
    return flat if len(flat) <= 200 else flat[:199] + "…"


def display(rel: PurePath) -> str:
    text = rel.as_posix()
    return "." if text in ("", ".") else text


def confine(
    root: Path, raw: str, access: Access, mode: Mode, *, real_root: str | None = None
) -> tuple[Path, PurePosixPath]:
    """(real path, workspace-relative path) for a path given by the model or the code.

    Relative paths start at the workspace root; absolute ones must lie inside it. Symlinks are
    resolved first, so the check is on where a path really leads. Raises `AccessDenied`.
    `real_root` is `os.path.realpath(root)` when the caller already has it (saves a walk).
    """
    if not raw.strip():
        raise NotAvailable("path is empty")
    if "\x00" in raw:
        raise NotAvailable("path contains a NUL byte")
    real_root = real_root or os.path.realpath(root)
    try:
        # os.path.realpath rather than Path.resolve(): same result, a fraction of the cost,
        # and this runs for every file of every prompt and every entry of a listing.
        real = os.path.realpath(os.path.join(real_root, os.path.expanduser(raw)))
    except (OSError, RuntimeError, ValueError):
        raise NotAvailable(f"{shown(raw)}: cannot resolve this path") from None
    if real == real_root:
        parts: tuple[str, ...] = ()
    elif real.startswith(real_root.rstrip(os.sep) + os.sep):
        parts = tuple(real[len(real_root.rstrip(os.sep)) + 1 :].split(os.sep))
    else:
        raise OutsideWorkspace(
            f"{shown(raw)}: outside the workspace; use a path relative to the workspace root"
        )
    rel = PurePosixPath(*parts)
    if not access.allows(rel, mode):
        if mode == "write" and access.allows(rel, "read"):
            raise NotAvailable(f"{display(rel)}: read-only in this chat")
        raise NotAvailable(f"{shown(raw)}: not available in this chat (private to the owner)")
    if mode != "list":
        _refuse_hard_link(Path(real), rel)
    return Path(real), rel


def _refuse_hard_link(real: Path, rel: PurePath) -> None:
    try:
        st = real.stat()
    except OSError:
        return  # missing: nothing shared yet (a write will create a fresh inode)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise HardLinked(
            f"{display(rel)}: has {st.st_nlink} hard links, so it may be another (private) "
            "file; refused. Copy the file instead of linking it"
        )


def open_regular(real: Path, rel: PurePath) -> BinaryIO:
    """Open a confined file for reading, re-checked on the open descriptor: the last component
    is not followed if it became a symlink, and it must still be one regular file with a
    single link. Raises AccessDenied, FileNotFoundError, IsADirectoryError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in (getattr(os, "ELOOP", -1), getattr(os, "EMLINK", -1)):
            raise NotAvailable(
                f"{display(rel)}: cannot be opened (a symlink loop, or a link put in its place)"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(display(rel))
        if not stat.S_ISREG(st.st_mode):
            raise NotAvailable(f"{display(rel)}: not a regular file")
        if st.st_nlink > 1:
            raise HardLinked(f"{display(rel)}: has {st.st_nlink} hard links; refused")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_append(real: Path, rel: PurePath) -> BinaryIO:
    """Open a confined file for appending, creating it if missing, with the checks of
    `open_regular` on the descriptor: a symlink put in its place is not followed, and a file
    that is not regular or has another hard link is refused before a byte is written."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno in (getattr(os, "ELOOP", -1), getattr(os, "EMLINK", -1)):
            raise NotAvailable(f"{display(rel)}: cannot be written (a link was put in its place)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAvailable(f"{display(rel)}: not a regular file")
        if st.st_nlink > 1:
            raise HardLinked(f"{display(rel)}: has {st.st_nlink} hard links; refused")
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def readable(root: Path, rel: PurePath, access: Access, *, real_root: str | None = None) -> bool:
    """True if `confine` would let this session read `rel` (used to filter listings)."""
    try:
        confine(root, PurePosixPath(*rel.parts).as_posix(), access, "read", real_root=real_root)
    except AccessDenied:
        return False
    return True
