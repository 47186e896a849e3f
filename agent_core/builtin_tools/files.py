"""File tools confined to the workspace: read_file, list_dir (READ); write_file, edit_file
(WRITE). Text files only (UTF-8); binary, missing and oversized inputs are clear errors.

What a session may touch is `workspace.access` (via `_paths`): a sub scope sees an allow-list,
and every message names workspace-relative paths only.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent_core.builtin_tools._paths import (
    access_of,
    display,
    read_bytes,
    resolve_in_workspace,
    write_atomically,
)
from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError
from workspace.access import Access

READ_CHAR_BUDGET = 15_000
"""Characters of file text per read_file call (below the 16k tool output cap)."""
MAX_READ_BYTES = 10 * 1024 * 1024
MAX_EDIT_BYTES = 10 * 1024 * 1024
MAX_LIST_ENTRIES = 1_000
_SNIFF_BYTES = 8_192


class ReadFileInput(BaseModel):
    path: str = Field(description="File path, relative to the workspace root.")
    start_line: int = Field(1, ge=1, description="First line to return (1-based).")
    max_lines: int | None = Field(None, ge=1, description="Most lines to return.")


class WriteFileInput(BaseModel):
    path: str = Field(description="File path, relative to the workspace root.")
    content: str = Field(description="The complete new content of the file.")


class EditFileInput(BaseModel):
    path: str = Field(description="File path, relative to the workspace root.")
    old_string: str = Field(description="Exact text to replace; must occur exactly once.")
    new_string: str = Field(description="Replacement text.")


class ListDirInput(BaseModel):
    path: str = Field(".", description="Directory, relative to the workspace root.")


def _decode(raw: bytes, name: str, truncated: bool = False) -> str:
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise ToolError(f"{name}: binary file ({len(raw):,} bytes read); not shown")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(raw) - 3:  # cut inside the last character
            return raw[: exc.start].decode("utf-8")
        raise ToolError(f"{name}: not a UTF-8 text file (binary?); not shown") from exc


def _read_file(ctx: ToolContext, args: ReadFileInput) -> str:
    real, rel = resolve_in_workspace(ctx, args.path, "read")
    name = display(rel)
    raw, size = read_bytes(real, rel, MAX_READ_BYTES)
    truncated = size > len(raw)
    text = _decode(raw, name, truncated)
    if not text:
        return f"({name} is empty)"
    lines = text.splitlines(keepends=True)
    first = args.start_line - 1
    if first >= len(lines):
        raise ToolError(f"{name}: start_line {args.start_line} is past the end ({len(lines)} lines)")
    shown: list[str] = []
    used = 0
    limit = args.max_lines if args.max_lines is not None else len(lines)
    for line in lines[first : first + limit]:
        if used + len(line) > READ_CHAR_BUDGET:
            if not shown:  # one huge line: show its start
                shown.append(line[:READ_CHAR_BUDGET] + "\n[… line cut …]\n")
            break
        shown.append(line)
        used += len(line)
    last = first + len(shown)
    out = "".join(shown)
    if last < len(lines) or truncated:
        more = f"; continue with start_line={last + 1}" if last < len(lines) else ""
        of = f"{len(lines)}" + ("+ (only the first 10 MB were read)" if truncated else "")
        out += f"\n[showing lines {first + 1}-{last} of {of}{more}]"
    return out


def _write_or_explain(real: Path, name: str, data: bytes) -> None:
    try:
        write_atomically(real, data)
    except OSError as exc:  # the OS message names the absolute path; ours does not
        raise ToolError(f"{name}: cannot write ({exc.strerror or type(exc).__name__})") from None


def _write_file(ctx: ToolContext, args: WriteFileInput) -> str:
    real, rel = resolve_in_workspace(ctx, args.path, "write")
    name = display(rel)
    if real.is_dir():
        raise ToolError(f"{name}: is a directory")
    existed = real.exists()
    data = args.content.encode("utf-8")
    _write_or_explain(real, name, data)
    verb = "replaced" if existed else "created"
    return f"{verb} {name} ({len(args.content):,} characters, {len(data):,} bytes)"


def _edit_file(ctx: ToolContext, args: EditFileInput) -> str:
    real, rel = resolve_in_workspace(ctx, args.path, "write")
    name = display(rel)
    if not args.old_string:
        raise ToolError("old_string is empty; use write_file to create or replace a file")
    if args.old_string == args.new_string:
        raise ToolError("old_string and new_string are identical; nothing to change")
    raw, size = read_bytes(real, rel, MAX_EDIT_BYTES + 1)
    if size > MAX_EDIT_BYTES:
        raise ToolError(f"{name}: too large to edit ({size:,} bytes)")
    text = _decode(raw, name)
    count = text.count(args.old_string)
    if count == 0:
        raise ToolError(
            f"{name}: old_string not found; read the file and copy the text exactly, "
            "including whitespace and line breaks"
        )
    if count > 1:
        raise ToolError(
            f"{name}: old_string occurs {count} times; include more surrounding text so it "
            "matches exactly once"
        )
    at = text.index(args.old_string)
    line = text.count("\n", 0, at) + 1
    _write_or_explain(real, name, text.replace(args.old_string, args.new_string, 1).encode("utf-8"))
    return f"edited {name}: replaced 1 occurrence starting at line {line}"


def _list_dir(ctx: ToolContext, args: ListDirInput) -> str:
    real, rel = resolve_in_workspace(ctx, args.path, "list")
    name = display(rel)
    if not real.exists():
        raise ToolError(f"{name}: no such directory")
    if not real.is_dir():
        raise ToolError(f"{name}: not a directory; use read_file")
    access = access_of(ctx)
    root = ctx.workspace.resolve()
    try:
        with os.scandir(real) as it:
            entries = sorted(it, key=lambda e: e.name)
        visible = [e for e in entries if _visible(e, rel, root, access)]
        rows = [_row(entry) for entry in visible[:MAX_LIST_ENTRIES]]
    except OSError as exc:
        raise ToolError(f"{name}: cannot list ({exc.strerror or type(exc).__name__})") from None
    if not rows:
        return f"{name}/ is empty"
    header = f"{name}/ ({len(visible)} entries)"
    if len(visible) > MAX_LIST_ENTRIES:
        header += f"; showing the first {MAX_LIST_ENTRIES}"
    return header + "\n" + "\n".join(rows)


def _row(entry: os.DirEntry[str]) -> str:
    """One line per entry; a symlink is marked but its target is never shown (it may be an
    absolute path of the machine)."""
    if entry.is_symlink():
        return f"{entry.name}@/ (link)" if entry.is_dir() else f"{entry.name}@ (link)"
    if entry.is_dir():
        return f"{entry.name}/"
    return f"{entry.name}  ({entry.stat().st_size:,} bytes)"


def _visible(entry: os.DirEntry[str], rel: Path, root: Path, access: Access) -> bool:
    """Show what the scope may reach, judged by where a symlink really leads; in a sub scope
    hide hard-linked files too (their size and name would hint at the other file)."""
    own = rel / entry.name
    if not access.allows(own, "list"):
        return False
    if entry.is_symlink():
        target = Path(entry.path).resolve()
        if not target.is_relative_to(root):
            return access.main
        if not access.allows(target.relative_to(root), "list"):
            return False
    if not access.main and entry.is_file() and entry.stat().st_nlink > 1:
        return False
    return True


async def _run_read(args: ReadFileInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_read_file, ctx, args)


async def _run_write(args: WriteFileInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_write_file, ctx, args)


async def _run_edit(args: EditFileInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_edit_file, ctx, args)


async def _run_list(args: ListDirInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_list_dir, ctx, args)


READ_FILE: Tool[ReadFileInput] = Tool(
    "read_file",
    "Read a UTF-8 text file in the workspace. Long files come in pages: pass start_line to "
    "continue where the previous call stopped.",
    ReadFileInput,
    Risk.READ,
    _run_read,
)
WRITE_FILE: Tool[WriteFileInput] = Tool(
    "write_file",
    "Create or overwrite a text file in the workspace with the given content (parent "
    "directories are created).",
    WriteFileInput,
    Risk.WRITE,
    _run_write,
    describe_action=lambda a: f"write {a.path} ({len(a.content):,} characters)\n\n{a.content}",
)
EDIT_FILE: Tool[EditFileInput] = Tool(
    "edit_file",
    "Replace one exact occurrence of old_string with new_string in a workspace file. Fails "
    "if old_string occurs zero or several times; read the file first.",
    EditFileInput,
    Risk.WRITE,
    _run_edit,
    describe_action=lambda a: (
        f"edit {a.path}\n--- replace ---\n{a.old_string}\n--- with ---\n{a.new_string}"
    ),
)
LIST_DIR: Tool[ListDirInput] = Tool(
    "list_dir",
    "List a directory in the workspace: sub-directories end with '/', files show their size.",
    ListDirInput,
    Risk.READ,
    _run_list,
)


def file_tools() -> list[Tool[Any]]:
    return [READ_FILE, WRITE_FILE, EDIT_FILE, LIST_DIR]
