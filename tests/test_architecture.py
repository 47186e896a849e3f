"""Imports flow one way (DESIGN.md, Layout): bot → adapters / agent_core → workspace."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "agent_core": {"bot", "adapters", "telegram", "discord"},
    "workspace": {"bot", "adapters", "agent_core", "telegram", "discord", "anthropic"},
    "adapters": {"bot", "anthropic"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_inward(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_roots(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(sorted(bad))}")
    assert not offenders, "\n".join(offenders)


def test_nothing_imports_bot_except_the_entry_point() -> None:
    for package in ("adapters", "agent_core", "workspace"):
        for path in (ROOT / package).rglob("*.py"):
            assert "bot" not in imported_roots(path), path


def test_only_the_llm_module_imports_anthropic() -> None:
    users = [p.relative_to(ROOT).as_posix() for pkg in ("agent_core", "bot", "adapters", "workspace")
             for p in (ROOT / pkg).rglob("*.py") if "anthropic" in imported_roots(p)]
    assert users == ["agent_core/anthropic_llm.py"]


PLATFORMS = ("telegram", "discord")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_platform_adapters_never_import_each_other() -> None:
    """What two platforms share lives once in adapters/ (cards, run_reply, pacing,
    button_actions), never in one platform's package for the other to borrow."""
    offenders = []
    for platform in PLATFORMS:
        others = tuple(f"adapters.{other}" for other in PLATFORMS if other != platform)
        for path in sorted((ROOT / "adapters" / platform).rglob("*.py")):
            bad = sorted(m for m in imported_modules(path) if m.startswith(others))
            if bad:
                offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)


def test_shared_adapter_modules_know_no_platform() -> None:
    offenders = []
    for path in sorted((ROOT / "adapters").glob("*.py")):
        bad = sorted(m for m in imported_modules(path)
                     if m.split(".")[0] in PLATFORMS or m.startswith(tuple(f"adapters.{p}" for p in PLATFORMS)))
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)
