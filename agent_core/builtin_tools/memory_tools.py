"""Memory tools: memory_search and memory_get (READ), memory_write (WRITE).

All three are confined to what the session's scope may see: a sub session searches and
reads only its own daily logs and can write only its own log; MEMORY.md is main's alone.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from pathlib import PurePath
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent_core.builtin_tools._paths import display, read_bytes, resolve_in_workspace, write_atomically
from agent_core.risk import Risk, Scope
from agent_core.tools import Tool, ToolContext, ToolError, cap_output
from workspace.access import AccessDenied, open_append
from workspace.daily_log import MEMORY_DIR, append_entry
from workspace.memory_files import LONG_TERM_FILE

MAX_GET_LINES = 400
MAX_MEMORY_CHARS = 100_000
MAX_GET_BYTES = 10 * 1024 * 1024


class MemorySearchInput(BaseModel):
    query: str = Field(min_length=1, description="Words to look for in memory.")
    limit: int = Field(8, ge=1, le=25, description="Most hits to return.")


class MemoryGetInput(BaseModel):
    path: str = Field(description="Memory file, e.g. MEMORY.md or memory/2025-01-31.md.")
    start_line: int = Field(1, ge=1, description="First line (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line (inclusive).")


class MemoryWriteInput(BaseModel):
    target: Literal["log", "memory"] = Field(
        "log",
        description="'log': append to this chat's log of today. 'memory': long-term "
        "MEMORY.md (owner's private chat only).",
    )
    text: str = Field(min_length=1, description="What to write (markdown).")
    mode: Literal["append", "replace"] = Field(
        "append", description="For target 'memory': append, or replace the whole file."
    )


async def _search(args: MemorySearchInput, ctx: ToolContext) -> str:
    if ctx.memory is None:
        raise ToolError("memory search is not available in this session")
    hits = await ctx.memory.search(args.query, limit=args.limit)
    if not hits:
        return f"no memory matches {args.query!r}"
    blocks = [
        f"{h['path']}:{h['start_line']}-{h['end_line']} (score {float(h['score']):.3f})\n"
        f"{h['snippet']}"
        for h in hits
    ]
    return cap_output("\n\n".join(blocks))


def _is_memory_file(rel: PurePath) -> bool:
    parts = rel.parts
    if parts == (LONG_TERM_FILE,):
        return True
    return len(parts) >= 2 and parts[0] == MEMORY_DIR and rel.suffix == ".md"


def _get(ctx: ToolContext, args: MemoryGetInput) -> str:
    real, rel = resolve_in_workspace(ctx, args.path, "read")
    name = display(rel)
    if not _is_memory_file(rel):
        raise ToolError(f"{name}: not a memory file (MEMORY.md or memory/**.md); use read_file")
    try:
        raw, _ = read_bytes(real, rel, MAX_GET_BYTES)
    except ToolError as exc:
        if str(exc) == f"{name}: no such file":
            raise ToolError(f"{name}: no such memory file") from None
        raise
    lines = raw.decode("utf-8", errors="replace").splitlines()
    end = args.end_line if args.end_line is not None else len(lines)
    if end < args.start_line:
        raise ToolError("end_line is before start_line")
    if lines and args.start_line > len(lines):
        raise ToolError(f"{name}: start_line {args.start_line} is past the end ({len(lines)} lines)")
    end = min(end, len(lines), args.start_line + MAX_GET_LINES - 1)
    body = "\n".join(lines[args.start_line - 1 : end])
    header = f"{name} lines {args.start_line}-{end} of {len(lines)}"
    return cap_output(f"{header}\n{body}")


async def _get_async(args: MemoryGetInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_get, ctx, args)


def _write_memory(ctx: ToolContext, args: MemoryWriteInput) -> str:
    # The file tools' confinement: a MEMORY.md that became a symlink out of the workspace or
    # a hard link to another file is refused, and the write itself never follows a link.
    real, rel = resolve_in_workspace(ctx, LONG_TERM_FILE, "write")
    if args.mode == "replace":
        if len(args.text) > MAX_MEMORY_CHARS:
            raise ToolError(f"MEMORY.md would exceed {MAX_MEMORY_CHARS:,} characters")
        write_atomically(real, (args.text.rstrip("\n") + "\n").encode("utf-8"))
        return f"replaced MEMORY.md ({len(args.text):,} characters)"
    try:
        with open_append(real, rel) as fh:
            prefix = b"\n" if os.fstat(fh.fileno()).st_size > 0 else b""
            fh.write(prefix + (args.text.rstrip("\n") + "\n").encode("utf-8"))
    except AccessDenied as exc:
        raise ToolError(str(exc)) from None
    return f"appended {len(args.text):,} characters to MEMORY.md"


def _reason(exc: OSError) -> str:
    """The OS's reason without its file name (str(exc) names the machine's absolute path)."""
    return exc.strerror or type(exc).__name__


async def _write(args: MemoryWriteInput, ctx: ToolContext) -> str:
    if args.target == "memory":
        if ctx.scope != Scope.MAIN:
            raise ToolError(
                "MEMORY.md is private to the owner's session; in this chat you can only "
                "write to this chat's own log (target 'log')"
            )
        try:
            return await asyncio.to_thread(_write_memory, ctx, args)
        except OSError as exc:
            raise ToolError(f"cannot write MEMORY.md ({_reason(exc)})") from None
    if args.mode == "replace":
        raise ToolError("the daily log is append-only; use mode 'append'")
    try:
        if ctx.memory is not None:
            path = await ctx.memory.append_log(args.text)
        else:
            now = datetime.now().astimezone()
            path = await asyncio.to_thread(
                append_entry, ctx.workspace, ctx.session_key, now, args.text
            )
    except OSError as exc:
        raise ToolError(f"cannot write this chat's log ({_reason(exc)})") from None
    root = ctx.workspace.resolve()
    real = path.resolve()
    where = real.relative_to(root).as_posix() if real.is_relative_to(root) else "this chat's log"
    return f"appended to {where}"


MEMORY_SEARCH: Tool[MemorySearchInput] = Tool(
    "memory_search",
    "Full-text search of your memory (long-term notes and daily logs this chat may see). "
    "Returns file, line range and a snippet per hit; use memory_get for the full text.",
    MemorySearchInput,
    Risk.READ,
    _search,
)
MEMORY_GET: Tool[MemoryGetInput] = Tool(
    "memory_get",
    f"Read lines of a memory file (MEMORY.md or memory/**.md), at most {MAX_GET_LINES} "
    "lines per call.",
    MemoryGetInput,
    Risk.READ,
    _get_async,
)
MEMORY_WRITE: Tool[MemoryWriteInput] = Tool(
    "memory_write",
    "Write to memory: append a note to this chat's log of today (target 'log'), or append "
    "to / replace long-term MEMORY.md (target 'memory', owner's private chat only).",
    MemoryWriteInput,
    Risk.WRITE,
    _write,
    describe_action=lambda a: f"memory_write {a.target} ({a.mode})\n\n{a.text}",
)


def memory_tools() -> list[Tool[Any]]:
    return [MEMORY_SEARCH, MEMORY_GET, MEMORY_WRITE]
