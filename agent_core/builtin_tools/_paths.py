"""Workspace confinement for path-taking tools: resolve symlinks, refuse anything outside the
workspace, and refuse what the session's scope may not see (workspace.access)."""

from __future__ import annotations

from pathlib import Path

from agent_core.tools import ToolContext, ToolError
from workspace.access import may_access


def resolve_in_workspace(ctx: ToolContext, raw: str) -> tuple[Path, Path]:
    """(absolute real path, path relative to the workspace) for a user-supplied path.

    Relative paths are taken from the workspace root; absolute ones must lie inside it.
    Symlinks are resolved first, so a link pointing out of the workspace is refused too.
    Raises ToolError("... outside the workspace ...") or ToolError for a private path.
    """
    if not raw.strip():
        raise ToolError("path is empty")
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    root = ctx.workspace.resolve()
    candidate = Path(raw).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        real = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop on 3.11
        raise ToolError(f"{raw}: cannot resolve path ({exc})") from exc
    if real != root and not real.is_relative_to(root):
        raise ToolError(f"{raw}: outside the workspace; only paths inside {root} are allowed")
    rel = real.relative_to(root)
    if not may_access(rel, ctx.session_key, ctx.scope):
        raise ToolError(f"{raw}: not available in this chat (private to the owner's session)")
    return real, rel


def display(rel: Path) -> str:
    text = rel.as_posix()
    return "." if text in ("", ".") else text
