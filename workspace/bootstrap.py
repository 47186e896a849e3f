"""Create a workspace from the templates shipped in `workspace/templates/`, never overwriting."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

REQUIRED_DIRS: tuple[str, ...] = ("memory", "skills")
"""Directories every workspace has, even when the installed package dropped empty folders."""

_SKIPPED_NAMES = frozenset({".gitkeep", "__pycache__"})


def templates_root() -> Traversable:
    """The packaged template tree (works from a wheel or a source checkout)."""
    return files("workspace").joinpath("templates")


def ensure_workspace(root: Path) -> list[Path]:
    """Create `root` and every missing template file or directory below it.

    Existing files are never touched, even if empty or different from the template. Returns
    the paths created by this call (directories and files, parents before children); an
    up-to-date workspace returns []. Safe to call on every start.
    """
    created: list[Path] = []
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"workspace path {root} exists and is not a directory")
    _made(root, created, parents=True)
    _copy_tree(templates_root(), root, created)
    for name in REQUIRED_DIRS:
        _made(root / name, created, parents=True)
    return created


def _made(path: Path, created: list[Path], *, parents: bool = False) -> None:
    """mkdir that another process may win (replicas starting at once on one workspace): a
    folder that appeared meanwhile is simply there, never an error."""
    try:
        path.mkdir(parents=parents)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    created.append(path)


def _copy_tree(source: Traversable, target: Path, created: list[Path]) -> None:
    for entry in sorted(source.iterdir(), key=lambda e: e.name):
        if entry.name in _SKIPPED_NAMES:
            continue
        dest = target / entry.name
        if entry.is_dir():
            _made(dest, created)
            _copy_tree(entry, dest, created)
            continue
        try:
            # "x" mode: a file that appeared meanwhile is left alone, never overwritten.
            with dest.open("xb") as fh:
                fh.write(entry.read_bytes())
        except FileExistsError:
            continue
        created.append(dest)
