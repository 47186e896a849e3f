"""What a command run by `exec` sees of the workspace, by scope.

The owner's private chat (main) sees the whole workspace. A sub scope (a group, a paired
user's chat) sees the same allow-list as its file tools (`workspace.access`): the identity
files, skills and its own logs read-only, its own folder and the folders the owner shared
with it writable; the rest of the workspace, like the rest of the machine, does not exist in
its empty root (`exec_root.py`). A place that is, or passes
through, a symbolic link is left covered: binding it would show wherever the link points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workspace.access import IDENTITY_FILES, SKILLS_DIR, check_extra_root
from workspace.daily_log import log_dir_for, session_dir_for


@dataclass(frozen=True, slots=True)
class WorkspaceView:
    visible: list[Path]
    hidden: list[Path] = field(default_factory=list)
    read_only: list[Path] = field(default_factory=list)
    home: Path | None = None
    """Where a sub scope's commands start (its own folder); None: the configured place."""


def sub_scope_view(workspace: Path, session_key: str, extra_roots: Sequence[str] = ()) -> WorkspaceView:
    root = workspace.resolve()
    own_rel = session_dir_for(session_key)
    if own_rel is None:
        raise ValueError("the main session has no sub-scope view")
    own = root / own_rel
    if _plain(root, own_rel.parent):
        own.mkdir(parents=True, exist_ok=True)  # where its commands start
    read_only = [root / name for name in IDENTITY_FILES]
    read_only += [root / SKILLS_DIR, root / log_dir_for(session_key)]
    writable = [own]
    for text in extra_roots:
        try:
            writable.append(root / check_extra_root(text))
        except ValueError:
            continue  # logged where the policy is loaded
    shown = [p for p in read_only + writable if p.exists() and _plain(root, p.relative_to(root))]
    if own not in shown:
        raise ValueError(f"the session's own folder {own_rel} is not a plain folder")
    return WorkspaceView(
        visible=shown,
        hidden=[root],
        read_only=[p for p in shown if p in read_only],
        home=own,
    )


def _plain(root: Path, rel: Path) -> bool:
    """No part of root/rel is a symbolic link."""
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            return False
    return True
