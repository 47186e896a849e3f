"""Where a chat's received files live: `inbox/` in the main workspace, `groups/<slug>/inbox/`
or `dms/<slug>/inbox/` for a sub session — inside the folder that session may read and
write (workspace.access), so a later turn can `read_file` it and no other chat can.

Names are the sender's, sanitised: no path separators or leading dots, no control or
invisible characters, nothing that could look like USER.md/MEMORY.md, at most 100
characters; an existing file is never overwritten (a counter is added)."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path, PurePosixPath

from workspace.access import PRIVATE_NAMES, skeleton
from workspace.daily_log import session_dir_for

INBOX_DIR = "inbox"
MAX_NAME = 100
_UNSAFE = re.compile(r"[^\w.\- ()+,@=]+")


def inbox_for(session_key: str) -> PurePosixPath:
    """The session's inbox folder, relative to the workspace root."""
    own = session_dir_for(session_key)
    return PurePosixPath(INBOX_DIR) if own is None else PurePosixPath(*own.parts, INBOX_DIR)


def safe_name(name: str, fallback: str = "file") -> str:
    """A file name that names exactly one file inside a folder (see the module docstring)."""
    text = unicodedata.normalize("NFC", name or "").replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] not in ("C",))
    text = _UNSAFE.sub("_", text).strip(" ._")
    if not text or skeleton(text) in PRIVATE_NAMES or skeleton(text).rsplit(".", 1)[0] in ("user", "memory"):
        text = fallback
    if len(text) > MAX_NAME:
        stem, dot, ext = text.rpartition(".")
        ext = ext[:10] if dot else ""
        text = (stem if dot else text)[: MAX_NAME - len(ext) - 1] + (f".{ext}" if ext else "")
    return text


def save(root: Path, session_key: str, name: str, data: bytes) -> PurePosixPath:
    """Write `data` as a new file in the session's inbox; returns its workspace-relative
    path. Never follows a symlink planted where the folder or file should be."""
    folder_rel = inbox_for(session_key)
    folder = root / folder_rel
    folder.mkdir(parents=True, exist_ok=True)
    if folder.is_symlink() or not folder.resolve().is_relative_to(root.resolve()):
        raise OSError("the inbox folder is not a plain folder inside the workspace")
    base = safe_name(name)
    stem, dot, ext = base.rpartition(".")
    if not dot:
        stem, ext = base, ""
    for n in range(1, 10_000):
        candidate = base if n == 1 else f"{stem}-{n}{'.' + ext if ext else ''}"
        try:
            fd = os.open(folder / candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return folder_rel / candidate
    raise OSError("too many files of that name")
