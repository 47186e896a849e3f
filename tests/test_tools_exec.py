"""exec: output, exit code, caps, and the whole process group dying on timeout or cancel."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
from agent_core.risk import Risk, Scope
from agent_core.tools import TOOL_OUTPUT_CAP, Tool, ToolContext, ToolError

DEADLINE_S = 10.0


def _ctx(root: Path) -> ToolContext:
    return ToolContext(session_key="main", scope=Scope.MAIN, workspace=root)


async def run(tool: Tool[Any], root: Path, command: str, **kw: Any) -> str:
    return await tool.func(ExecInput(command=command, **kw), _ctx(root))


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_until(predicate: Any, what: str) -> None:
    """Wait on a condition with a deadline (no fixed sleeps deciding the outcome)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# A child that records its pid, then would write `late.txt` long after any timeout.
SPAWN = (
    "(sleep 5; echo too-late > late.txt) & echo $! > child.pid; "
    "sh -c 'sleep 60' & echo $! > grandchild.pid; echo started; sleep 60"
)


def test_metadata() -> None:
    tool = make_exec_tool(max_timeout_s=120)
    assert tool.name == "exec" and tool.risk is Risk.EXEC
    assert tool.timeout_s is not None and tool.timeout_s > 120
    cmd = "echo " + "x" * 5000 + " && rm -rf ./build"
    assert tool.action_text(ExecInput(command=cmd)) == cmd


async def test_output_and_exit_code(tmp_path: Path) -> None:
    tool = make_exec_tool()
    out = await run(tool, tmp_path, "echo hello; echo oops >&2; pwd; exit 3")
    assert out.startswith("exit code: 3")
    assert "--- stdout ---\nhello\n" + str(tmp_path) in out
    assert "--- stderr ---\noops" in out
    assert (await run(tool, tmp_path, "true")) == "exit code: 0\n(no output)"


async def test_configured_directory(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    out = await run(make_exec_tool(cwd=other), tmp_path, "pwd")
    assert str(other) in out


async def test_secrets_are_not_in_the_environment(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "TELEGRAM_BOT_TOKEN": "t0k", "ANTHROPIC_API_KEY": "k",
           "ROOST_DATABASE_URL": "postgresql://u:pw@h/db", "FOO": "bar"}
    out = await run(make_exec_tool(env=env), tmp_path, 'echo "[$TELEGRAM_BOT_TOKEN$ANTHROPIC_API_KEY$ROOST_DATABASE_URL|$FOO]"')
    assert "[|bar]" in out


async def test_huge_output_is_capped(tmp_path: Path) -> None:
    out = await run(make_exec_tool(), tmp_path, "head -c 5000000 /dev/zero | tr '\\0' a; echo END")
    assert len(out) <= TOOL_OUTPUT_CAP
    assert out.startswith("exit code: 0")
    assert "omitted" in out and out.rstrip().endswith("END")


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    tool = make_exec_tool(default_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        await run(tool, tmp_path, SPAWN)
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert message.startswith("timed out after 0.5 s; process group killed")
    assert "started" in message  # partial output is kept
    pids = [int((tmp_path / n).read_text()) for n in ("child.pid", "grandchild.pid")]
    await wait_until(lambda: all(_dead(p) for p in pids), "children to die")
    assert not (tmp_path / "late.txt").exists()


async def test_timeout_is_capped_by_the_configured_maximum(tmp_path: Path) -> None:
    tool = make_exec_tool(max_timeout_s=0.3)
    with pytest.raises(ToolError, match=r"timed out after 0.3 s"):
        await run(tool, tmp_path, "sleep 30", timeout_s=1000)


async def test_cancellation_kills_the_group_and_propagates(tmp_path: Path) -> None:
    tool = make_exec_tool(default_timeout_s=60)
    task = asyncio.create_task(run(tool, tmp_path, SPAWN))
    await wait_until(lambda: (tmp_path / "grandchild.pid").exists(), "command to start")
    await wait_until(lambda: (tmp_path / "grandchild.pid").read_text().strip() != "", "pid file")
    pids = [int((tmp_path / n).read_text()) for n in ("child.pid", "grandchild.pid")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: all(_dead(p) for p in pids), "children to die")
    assert not (tmp_path / "late.txt").exists()


async def test_background_process_with_closed_pipes_does_not_block(tmp_path: Path) -> None:
    out = await run(make_exec_tool(default_timeout_s=5), tmp_path,
                    "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo done")
    assert "exit code: 0" in out and "done" in out
    os.kill(int((tmp_path / "bg.pid").read_text()), 9)
