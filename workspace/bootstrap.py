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
    if not root.exists():
        root.mkdir(parents=True)
        created.append(root)
    elif not root.is_dir():
        raise NotADirectoryError(f"workspace path {root} exists and is not a directory")
    _copy_tree(templates_root(), root, created)
    for name in REQUIRED_DIRS:
        path = root / name
        if not path.exists():
            path.mkdir(parents=True)
            created.append(path)
    return created


def _copy_tree(source: Traversable, target: Path, created: list[Path]) -> None:
    for entry in sorted(source.iterdir(), key=lambda e: e.name):
        if entry.name in _SKIPPED_NAMES:
            continue
        dest = target / entry.name
        if entry.is_dir():
            if not dest.exists():
                dest.mkdir()
                created.append(dest)
            _copy_tree(entry, dest, created)
            continue
        try:
            # "x" mode: a file that appeared meanwhile is left alone, never overwritten.
            with dest.open("xb") as fh:
                fh.write(entry.read_bytes())
        except FileExistsError:
            continue
        created.append(dest)
