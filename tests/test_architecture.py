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


def _bot_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The bot module `name` denotes (itself or the nearest enclosing package); None outside bot."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def bot_import_graph() -> dict[str, set[str]]:
    """Which bot modules each bot module imports. Every import statement counts, wherever it
    stands: at module level, inside a function (a "late import to dodge the cycle" is still
    the cycle) and under `if TYPE_CHECKING:` (an annotation naming a higher module is a
    dependency on it too; a Protocol in a lower module is what breaks it). `from bot.x import
    y` is an edge to bot.x.y when y is a module, else to bot.x. A package's own __init__,
    which Python runs before any of its modules, is not counted as an edge."""
    paths = {_bot_module(p): p for p in (ROOT / "bot").rglob("*.py") if "migrations" not in p.parts}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != module and not module.startswith(target + "."):
                    targets.add(target)
        graph[module] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module, as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_bot_has_no_import_cycle() -> None:
    """No circle in bot/'s imports: features plug into bot.registry; Conversations, the chat
    commands and the operations layer import only modules below them."""
    cycles = import_cycles(bot_import_graph())
    assert not cycles, "import cycles in bot/:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


# Chat-command modules that are thin callers of bot.operations (issue 18): they read and write
# the database only through an Operations verb, which checks the actor's role once. Not listed
# (they still call storage): bot/structured.py (answers to a question put before a
# restart), bot/queue_modes.py (taking queued messages into a run), bot/conversations.py.
THIN_CHAT_MODULES = ("bot/command_handlers.py", "bot/features.py", "bot/scheduling/chat.py")


def storage_uses(path: Path) -> list[str]:
    """Each `<x>.storage.<y>` and each `.storage` read outside `__init__` (where the
    Operations object is built from the host's storage), as `line: source`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    wiring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            wiring.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        through = isinstance(node.value, ast.Attribute) and node.value.attr == "storage"
        if through or (node.attr == "storage" and id(node) not in wiring):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", THIN_CHAT_MODULES)
def test_chat_commands_reach_storage_only_through_operations(module: str) -> None:
    assert storage_uses(ROOT / module) == [], f"{module} touches storage directly; add an Operations verb"
