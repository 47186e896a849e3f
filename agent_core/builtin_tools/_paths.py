"""Workspace confinement for path-taking tools: `workspace.access` rules, errors as ToolError.

Every path-taking tool goes through `resolve_in_workspace` (symlinks resolved, outside paths
refused, the scope's allow-list applied, hard-linked files refused) and reads through
`read_bytes` (re-checked on the open descriptor). Messages name workspace-relative paths
only: they are shown in group chats.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

from agent_core.tools import ToolContext, ToolError
from workspace.access import Access, AccessDenied, Mode, confine, display, open_regular

__all__ = ["access_of", "display", "read_bytes", "resolve_in_workspace", "write_atomically"]


def access_of(ctx: ToolContext) -> Access:
    return Access(ctx.session_key, str(ctx.scope), tuple(ctx.extra_roots))


def resolve_in_workspace(
    ctx: ToolContext, raw: str, mode: Mode = "read"
) -> tuple[Path, PurePosixPath]:
    """(absolute real path, workspace-relative path) for a user-supplied path, or ToolError
    ("outside the workspace", "not available in this chat", "read-only", "hard links")."""
    try:
        return confine(ctx.workspace, raw, access_of(ctx), mode)
    except AccessDenied as exc:
        raise ToolError(str(exc)) from None


def read_bytes(real: Path, rel: PurePosixPath, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes of a confined regular file and its size; ToolError for a missing,
    directory, special, hard-linked or unreadable file (relative names only)."""
    name = display(rel)
    try:
        with open_regular(real, rel) as fh:
            size = os.fstat(fh.fileno()).st_size
            return fh.read(limit), size
    except AccessDenied as exc:
        raise ToolError(str(exc)) from None
    except FileNotFoundError:
        raise ToolError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise ToolError(f"{name}: is a directory; use list_dir") from None
    except OSError as exc:
        raise ToolError(f"{name}: cannot read ({exc.strerror or type(exc).__name__})") from None



def write_atomically(real: Path, data: bytes) -> None:
    """Replace a confined file by a new one (a temporary file renamed over it): a link swapped
    in after `resolve_in_workspace` is itself replaced, never written through, and a hard link
    elsewhere keeps its old content. Raises OSError."""
    real.parent.mkdir(parents=True, exist_ok=True)
    mode = real.stat().st_mode & 0o7777 if real.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
