"""exec: output, exit code, caps, the allow-listed environment, and nothing it started
outliving the call (on exit, timeout or cancel), `setsid` included."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
from agent_core.builtin_tools.sandbox import Sandbox
from agent_core.risk import Risk, Scope
from agent_core.tools import TOOL_OUTPUT_CAP, Tool, ToolContext, ToolError

DEADLINE_S = 10.0


def _ctx(root: Path) -> ToolContext:
    return ToolContext(session_key="main", scope=Scope.MAIN, workspace=root)


async def run(tool: Tool[Any], root: Path, command: str, **kw: Any) -> str:
    return await tool.func(ExecInput(command=command, **kw), _ctx(root))


def alive_with(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line mentions `marker`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def wait_until(predicate: Any, what: str) -> None:
    """Wait on a condition with a deadline (no fixed sleeps deciding the outcome)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def spawn(marker: str) -> str:
    """A command that starts a plain child, a `setsid` grandchild (its own session and
    process group) and a double-forked daemon, all carrying `marker`, then waits."""
    return (
        f"sh -c 'sleep 60' {marker}-child & "
        f"setsid sh -c 'sleep 60' {marker}-setsid & "
        f"(setsid sh -c 'sleep 60' {marker}-daemon &) ; "
        "echo started; sleep 60"
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


async def test_commands_write_workspace_files(tmp_path: Path) -> None:
    await run(make_exec_tool(), tmp_path, "echo made > made.txt && mkdir -p sub && echo x > sub/y")
    assert (tmp_path / "made.txt").read_text() == "made\n"
    assert (tmp_path / "sub" / "y").read_text() == "x\n"


async def test_configured_directory(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    out = await run(make_exec_tool(cwd=other), tmp_path, "pwd")
    assert str(other) in out


async def test_environment_is_an_allow_list(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "LC_TIME": "C", "TELEGRAM_BOT_TOKEN": "t0k",
           "ANTHROPIC_API_KEY": "k", "ROOST_DATABASE_URL": "postgresql://u:pw@h/db", "MY_PASSPHRASE": "pp",
           "AWS_SESSION": "sess", "HOME": "/root"}
    out = await run(make_exec_tool(env=env), tmp_path, "env")
    seen = dict(line.split("=", 1) for line in out.split("--- stdout ---\n", 1)[1].splitlines() if "=" in line)
    assert seen["PATH"] == os.environ["PATH"] and seen["LANG"] == "C.UTF-8" and seen["LC_TIME"] == "C"
    assert seen["HOME"] == str(tmp_path)
    for value in ("t0k", "postgresql://u:pw@h/db", "pp", "sess"):
        assert value not in out
    assert "k" not in seen.values()


async def test_huge_output_is_capped(tmp_path: Path) -> None:
    out = await run(make_exec_tool(), tmp_path, "head -c 5000000 /dev/zero | tr '\\0' a; echo END")
    assert len(out) <= TOOL_OUTPUT_CAP
    assert out.startswith("exit code: 0")
    assert "omitted" in out and out.rstrip().endswith("END")


async def test_setsid_background_does_not_turn_a_finished_command_into_a_timeout(tmp_path: Path) -> None:
    """Reproduced: `setsid sleep 30 & echo hi` held the output pipe, so a command that had
    finished was reported as timed out 30 s later."""
    marker = f"m{uuid.uuid4().hex}"
    tool = make_exec_tool(default_timeout_s=30)
    started = time.monotonic()
    out = await run(tool, tmp_path, f"setsid sh -c 'sleep 30' {marker} & echo hi")
    elapsed = time.monotonic() - started
    assert out == "exit code: 0\n--- stdout ---\nhi"
    assert elapsed < 15, elapsed  # it takes milliseconds; the timeout is 30 s
    await wait_until(lambda: not alive_with(marker), "the background process to be gone")


async def test_setsid_grandchild_dies_at_timeout(tmp_path: Path) -> None:
    """Reproduced: a `setsid` grandchild left its process group and survived the kill."""
    marker = f"m{uuid.uuid4().hex}"
    tool = make_exec_tool(default_timeout_s=5)
    task = asyncio.create_task(run(tool, tmp_path, spawn(marker)))
    await wait_until(lambda: len(alive_with(marker)) >= 3, "the command's processes to start")
    with pytest.raises(ToolError) as info:
        await task
    message = str(info.value)
    assert message.startswith("timed out after 5 s; the command and everything it started were killed")
    assert "started" in message  # partial output is kept
    await wait_until(lambda: not alive_with(marker), "every descendant to die")


async def test_timeout_is_capped_by_the_configured_maximum(tmp_path: Path) -> None:
    tool = make_exec_tool(max_timeout_s=0.3)
    with pytest.raises(ToolError, match=r"timed out after 0.3 s"):
        await run(tool, tmp_path, "sleep 30", timeout_s=1000)


async def test_cancellation_kills_every_descendant_and_propagates(tmp_path: Path) -> None:
    marker = f"m{uuid.uuid4().hex}"
    task = asyncio.create_task(run(make_exec_tool(default_timeout_s=60), tmp_path, spawn(marker)))
    await wait_until(lambda: len(alive_with(marker)) >= 3, "the command's processes to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not alive_with(marker), "every descendant to die")


async def test_background_process_with_closed_pipes_does_not_block(tmp_path: Path) -> None:
    marker = f"m{uuid.uuid4().hex}"
    out = await run(make_exec_tool(default_timeout_s=20), tmp_path,
                    f"sh -c 'sleep 30' {marker} >/dev/null 2>&1 & echo done")
    assert out == "exit code: 0\n--- stdout ---\ndone"
    await wait_until(lambda: not alive_with(marker), "the background process to be gone")


async def test_unsandboxed_mode_still_returns_when_the_command_exits(tmp_path: Path) -> None:
    """ROOST_AGENT__EXEC_SANDBOX=off: the owner's explicit choice; the pipe rule still holds."""
    marker = f"m{uuid.uuid4().hex}"
    tool = make_exec_tool(default_timeout_s=30, sandbox=Sandbox(mode="off"))
    started = time.monotonic()
    out = await run(tool, tmp_path, f"sh -c 'sleep 30' {marker} & echo hi")
    assert out == "exit code: 0\n--- stdout ---\nhi"
    assert time.monotonic() - started < 15
    await wait_until(lambda: not alive_with(marker), "the background process to be gone")
