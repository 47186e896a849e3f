"""File tools: confinement, scope privacy, binary / missing / ambiguous inputs, paging."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent_core.builtin_tools.files import (
    EDIT_FILE,
    LIST_DIR,
    READ_FILE,
    READ_CHAR_BUDGET,
    WRITE_FILE,
    file_tools,
)
from agent_core.risk import Risk, Scope
from agent_core.tools import Tool, ToolContext, ToolError

GROUP = "group:telegram:-100123"


def _ctx(root: Path, key: str = "main", scope: Scope = Scope.MAIN) -> ToolContext:
    return ToolContext(session_key=key, scope=scope, workspace=root)


async def call(tool: Tool[Any], ctx: ToolContext, **kwargs: Any) -> str:
    return await tool.func(tool.input_model(**kwargs), ctx)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside secret", encoding="utf-8")
    return root


def test_risk_classes() -> None:
    risks = {t.name: t.risk for t in file_tools()}
    assert risks == {
        "read_file": Risk.READ,
        "write_file": Risk.WRITE,
        "edit_file": Risk.WRITE,
        "list_dir": Risk.READ,
    }


async def test_read_happy_path(ws: Path) -> None:
    assert await call(READ_FILE, _ctx(ws), path="notes.txt") == "alpha\nbeta\ngamma\n"
    assert await call(READ_FILE, _ctx(ws), path=str(ws / "notes.txt")) == "alpha\nbeta\ngamma\n"
    page = await call(READ_FILE, _ctx(ws), path="notes.txt", start_line=2, max_lines=1)
    assert page.startswith("beta\n") and "[showing lines 2-2 of 3; continue with start_line=3]" in page


@pytest.mark.parametrize(
    "path", ["../secret.txt", "../../etc/passwd", "/etc/passwd", "sub/../../secret.txt", "~/x"]
)
@pytest.mark.parametrize("tool", [READ_FILE, WRITE_FILE, LIST_DIR])
async def test_traversal_is_refused(ws: Path, path: str, tool: Tool[Any]) -> None:
    kwargs: dict[str, Any] = {"path": path}
    if tool is WRITE_FILE:
        kwargs["content"] = "pwned"
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(tool, _ctx(ws), **kwargs)
    assert (ws.parent / "secret.txt").read_text(encoding="utf-8") == "outside secret"


async def test_symlink_out_of_the_workspace_is_refused(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent)
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(READ_FILE, _ctx(ws), path="link.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(WRITE_FILE, _ctx(ws), path="linkdir/secret.txt", content="x")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(EDIT_FILE, _ctx(ws), path="link.txt", old_string="outside", new_string="x")
    assert (ws.parent / "secret.txt").read_text(encoding="utf-8") == "outside secret"


async def test_binary_file_is_a_clear_error(ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (ws / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ToolError, match="binary file"):
        await call(READ_FILE, _ctx(ws), path="img.png")
    with pytest.raises(ToolError, match="not a UTF-8 text file"):
        await call(READ_FILE, _ctx(ws), path="latin1.txt")
    with pytest.raises(ToolError, match="binary"):
        await call(EDIT_FILE, _ctx(ws), path="img.png", old_string="PNG", new_string="JPG")


async def test_missing_file_and_directory(ws: Path) -> None:
    with pytest.raises(ToolError, match="no such file"):
        await call(READ_FILE, _ctx(ws), path="nope.md")
    with pytest.raises(ToolError, match="no such file"):
        await call(EDIT_FILE, _ctx(ws), path="nope.md", old_string="a", new_string="b")
    with pytest.raises(ToolError, match="no such directory"):
        await call(LIST_DIR, _ctx(ws), path="nope")
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await call(READ_FILE, _ctx(ws), path="d")


async def test_big_file_is_paged_under_the_output_cap(ws: Path) -> None:
    lines = [f"line {i:06d} " + "x" * 80 for i in range(20_000)]
    (ws / "big.log").write_text("\n".join(lines), encoding="utf-8")
    first = await call(READ_FILE, _ctx(ws), path="big.log")
    assert len(first) <= READ_CHAR_BUDGET + 200
    assert first.startswith("line 000000")
    assert "of 20000; continue with start_line=" in first
    nxt = int(first.rsplit("start_line=", 1)[1].rstrip("]"))
    second = await call(READ_FILE, _ctx(ws), path="big.log", start_line=nxt)
    assert second.startswith(f"line {nxt - 1:06d}")
    with pytest.raises(ToolError, match="past the end"):
        await call(READ_FILE, _ctx(ws), path="big.log", start_line=30_000)
    (ws / "oneline.txt").write_text("y" * 100_000, encoding="utf-8")
    assert len(await call(READ_FILE, _ctx(ws), path="oneline.txt")) < READ_CHAR_BUDGET + 200


async def test_write_creates_parents_and_replaces(ws: Path) -> None:
    out = await call(WRITE_FILE, _ctx(ws), path="a/b/c.md", content="héllo\n")
    assert out.startswith("created a/b/c.md")
    assert (ws / "a/b/c.md").read_text(encoding="utf-8") == "héllo\n"
    os.chmod(ws / "a/b/c.md", 0o600)
    out = await call(WRITE_FILE, _ctx(ws), path="a/b/c.md", content="bye")
    assert out.startswith("replaced") and (ws / "a/b/c.md").read_text(encoding="utf-8") == "bye"
    assert (ws / "a/b/c.md").stat().st_mode & 0o777 == 0o600
    assert not [p for p in (ws / "a/b").iterdir() if p.name.endswith(".tmp")]


async def test_edit_exactly_once(ws: Path) -> None:
    out = await call(EDIT_FILE, _ctx(ws), path="notes.txt", old_string="beta", new_string="BETA")
    assert "line 2" in out
    assert (ws / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\ngamma\n"


async def test_edit_ambiguous_or_missing_match_changes_nothing(ws: Path) -> None:
    (ws / "dup.txt").write_bytes(b"x = 1\r\nx = 1\r\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        await call(EDIT_FILE, _ctx(ws), path="dup.txt", old_string="x = 1", new_string="x = 2")
    with pytest.raises(ToolError, match="not found"):
        await call(EDIT_FILE, _ctx(ws), path="dup.txt", old_string="y = 1", new_string="y = 2")
    with pytest.raises(ToolError, match="empty"):
        await call(EDIT_FILE, _ctx(ws), path="dup.txt", old_string="", new_string="z")
    assert (ws / "dup.txt").read_bytes() == b"x = 1\r\nx = 1\r\n"
    await call(EDIT_FILE, _ctx(ws), path="dup.txt", old_string="x = 1\r\nx", new_string="x = 1\r\ny")
    assert (ws / "dup.txt").read_bytes() == b"x = 1\r\ny = 1\r\n"  # CRLF preserved


async def test_list_dir(ws: Path) -> None:
    (ws / "sub").mkdir()
    out = await call(LIST_DIR, _ctx(ws))
    assert out.splitlines()[0] == "./ (2 entries)"
    assert "notes.txt  (17 bytes)" in out and "sub/" in out
    with pytest.raises(ToolError, match="not a directory"):
        await call(LIST_DIR, _ctx(ws), path="notes.txt")


async def test_sub_scope_cannot_touch_private_files(ws: Path) -> None:
    (ws / "USER.md").write_text("CANARY_USER", encoding="utf-8")
    (ws / "MEMORY.md").write_text("CANARY_MEMORY", encoding="utf-8")
    (ws / "memory/groups/telegram_-100123").mkdir(parents=True)
    (ws / "memory/groups/telegram_-100123/2025-01-01.md").write_text("own", encoding="utf-8")
    (ws / "memory/groups/other").mkdir(parents=True)
    (ws / "memory/2025-01-01.md").write_text("CANARY_MAIN_LOG", encoding="utf-8")
    (ws / "alias.md").symlink_to(ws / "MEMORY.md")
    sub = _ctx(ws, GROUP, Scope.SUB)
    for path in ("USER.md", "user.md", "MEMORY.md", "alias.md", "memory/2025-01-01.md"):
        with pytest.raises(ToolError, match="not available in this chat"):
            await call(READ_FILE, sub, path=path)
    with pytest.raises(ToolError, match="not available in this chat"):
        await call(WRITE_FILE, sub, path="MEMORY.md", content="overwritten")
    with pytest.raises(ToolError, match="not available in this chat"):
        await call(LIST_DIR, sub, path="memory/groups/other")
    assert await call(READ_FILE, sub, path="memory/groups/telegram_-100123/2025-01-01.md") == "own"
    listing = await call(LIST_DIR, sub, path="memory")
    assert "groups/" in listing and "2025-01-01.md" not in listing
    assert "other" not in await call(LIST_DIR, sub, path="memory/groups")
    top = await call(LIST_DIR, sub)
    assert top == "./ (1 entries)\nmemory/"  # an allow-list: notes.txt is the owner's too
    assert (ws / "MEMORY.md").read_text(encoding="utf-8") == "CANARY_MEMORY"
    main_text = await call(READ_FILE, _ctx(ws), path="MEMORY.md")
    assert main_text == "CANARY_MEMORY"


# --- send_message and the default tool set (other built-ins without a file of their own) ---


class FakeMessenger:
    """Implements agent_core.tools.Messenger; records what it delivered."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[str] = []
        self.fail = fail

    async def send(self, text: str) -> str:
        if self.fail is not None:
            raise self.fail
        self.sent.append(text)
        return f"message id {len(self.sent)}"


async def test_send_message_confirms_only_real_delivery(tmp_path: Path) -> None:
    from agent_core.builtin_tools.messaging import SEND_MESSAGE

    assert SEND_MESSAGE.risk is Risk.WRITE
    messenger = FakeMessenger()
    ctx = ToolContext("main", Scope.MAIN, tmp_path, messenger=messenger)
    assert await call(SEND_MESSAGE, ctx, text="hello") == "sent (message id 1)"
    assert messenger.sent == ["hello"]
    with pytest.raises(ToolError, match="no chat is connected"):
        await call(SEND_MESSAGE, _ctx(tmp_path), text="hello")
    broken = ToolContext("main", Scope.MAIN, tmp_path, messenger=FakeMessenger(RuntimeError("chat not found")))
    with pytest.raises(ToolError, match="message not sent: RuntimeError: chat not found"):
        await call(SEND_MESSAGE, broken, text="hello")


def test_default_tools_are_complete_and_stable() -> None:
    from agent_core.builtin_tools import default_tools
    from agent_core.tools import ToolRegistry

    registry = ToolRegistry(default_tools(exec_max_timeout_s=60))
    assert registry.names() == [
        "read_file", "write_file", "edit_file", "list_dir", "exec", "web_fetch",
        "memory_search", "memory_get", "memory_write", "load_skill", "send_message", "send_file",
    ]
    assert registry.schemas() == ToolRegistry(default_tools(exec_max_timeout_s=60)).schemas()
    exec_tool = registry.get("exec")
    assert exec_tool is not None and exec_tool.timeout_s is not None and exec_tool.timeout_s > 60


def test_core_and_workspace_never_import_platform_code() -> None:
    import ast

    repo = Path(__file__).resolve().parent.parent
    banned = ("bot", "adapters", "telegram", "discord", "anthropic")
    for package in ("agent_core/builtin_tools", "workspace"):
        for path in (repo / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = (
                    [a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                )
                for name in names:
                    assert name.split(".")[0] not in banned, f"{path} imports {name}"
                    if package == "workspace":
                        assert not name.startswith("agent_core"), f"{path} imports {name}"
