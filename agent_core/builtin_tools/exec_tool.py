"""The `exec` tool: a shell command in the sandbox (`sandbox.py`: its own user, PID and mount
namespaces, a private /tmp; in a sub scope an empty root and no network), with an
allow-listed environment and a timeout. When the command exits, or
times out, or the call is cancelled, everything it started is killed."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field

from agent_core.builtin_tools.sandbox import (
    ISOLATED_FIX,
    SETUP_FAILED,
    UNAVAILABLE_FIX,
    Sandbox,
    SandboxUnavailable,
    command_env,
)
from agent_core.builtin_tools.exec_view import WorkspaceView, sub_scope_view
from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError, cap_output
from workspace.access import is_main

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_TIMEOUT_S = 600.0
RAW_CAP_BYTES = 1024 * 1024
"""Bytes kept per stream (head and tail halves); the rest is counted and dropped."""
_DRAIN_GRACE_S = 2.0
"""After the command ended, how long to wait for pipes still held by other processes."""


class ExecInput(BaseModel):
    command: str = Field(min_length=1, description="Shell command (run with /bin/sh -c).")
    timeout_s: float | None = Field(
        None, gt=0, description="Seconds before the command is killed (default 30)."
    )


class _CappedBuffer:
    """Keeps the first and last `cap/2` bytes of a stream and counts what was dropped."""

    def __init__(self, cap: int = RAW_CAP_BYTES) -> None:
        self._half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self._half:
                del self.tail[: len(self.tail) - self._half]

    def text(self) -> str:
        tail = self.tail[-self._half :] if self.tail else b""
        dropped = self.total - len(self.head) - len(tail)
        out = self.head.decode("utf-8", "replace")
        if dropped > 0:
            out += f"\n[… {dropped:,} bytes dropped of {self.total:,} …]\n"
        return out + bytes(tail).decode("utf-8", "replace")


class _Collector(asyncio.SubprocessProtocol):
    """Collects both output streams and tells apart "the command exited" from "every pipe
    closed": a background process may hold a pipe long after the command finished."""

    def __init__(self) -> None:
        self.out, self.err = _CappedBuffer(), _CappedBuffer()
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.out if fd == 1 else self.err).feed(data)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


def _kill_group(pid: int) -> None:
    """SIGKILL the command's process group. Sandboxed, that group holds `unshare` and pid 1
    of the command's PID namespace, whose death makes the kernel kill every process in it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _settle(proto: _Collector, grace_s: float) -> bool:
    """Wait up to `grace_s` for the output pipes to close; False if something still holds
    them (then we stop reading)."""
    try:
        async with asyncio.timeout(grace_s):
            await proto.closed.wait()
        return True
    except TimeoutError:
        return False


def _report(code: int | None, out: _CappedBuffer, err: _CappedBuffer, header: str) -> str:
    parts = [header]
    if out.total:
        parts.append(f"--- stdout ---\n{out.text().rstrip()}")
    if err.total:
        parts.append(f"--- stderr ---\n{err.text().rstrip()}")
    if not out.total and not err.total and code is not None:
        parts.append("(no output)")
    return cap_output("\n".join(parts))


def make_exec_tool(
    *,
    max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
    default_timeout_s: float = DEFAULT_TIMEOUT_S,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    sandbox: Sandbox | None = None,
) -> Tool[ExecInput]:
    """Build `exec`. Commands run in `cwd` (default: the session's workspace) inside
    `sandbox` (default: namespaces hiding nothing but Roost's processes; `bot.app` passes
    Roost's private paths), with an allow-listed environment taken from `env` (default:
    this process's) and HOME set to the workspace. `timeout_s` from the model is capped
    at `max_timeout_s`.

    Result: exit code plus stdout/stderr (1 MB kept per stream, 16,000 characters to the
    model). The call ends when the command exits: whatever it left running is killed. On
    timeout everything it started is killed and a ToolError says "timed out after N s"
    with the partial output; on cancellation the same, and CancelledError propagates. If
    the sandbox cannot be created here, every call is a ToolError saying why.
    """
    if max_timeout_s <= 0 or default_timeout_s <= 0:
        raise ValueError("exec timeouts must be positive")
    default_timeout_s = min(default_timeout_s, max_timeout_s)
    box = sandbox if sandbox is not None else Sandbox()

    async def run(args: ExecInput, ctx: ToolContext) -> str:
        timeout = min(args.timeout_s or default_timeout_s, max_timeout_s)
        workdir = cwd if cwd is not None else ctx.workspace
        view = WorkspaceView([ctx.workspace])
        isolated = not is_main(ctx.scope)
        if isolated:
            if not box.enabled:
                raise ToolError("exec is not available outside the owner's private chat while "
                                "the sandbox is off (ROOST_AGENT__EXEC_SANDBOX=off)")
            try:
                view = sub_scope_view(ctx.workspace, ctx.session_key, ctx.extra_roots)
            except ValueError as exc:
                raise ToolError(f"exec cannot run here: {exc}") from None
            workdir = view.home
        try:
            await box.probe(workdir, [workdir] if isolated else [ctx.workspace], isolated=isolated)
            argv = box.argv(args.command, workdir, view.visible, also_hidden=view.hidden,
                            read_only=view.read_only, isolated=isolated)
        except SandboxUnavailable as exc:
            if isolated:
                raise ToolError(
                    "exec is unavailable in this chat: outside the owner's private chat commands "
                    "run in their own user, PID, mount, network and IPC namespaces, and those "
                    f"cannot be created here ({exc}). The owner can fix this: {ISOLATED_FIX}."
                ) from None
            raise ToolError(
                "exec is unavailable on this machine: commands run in their own user, PID and "
                f"mount namespaces so they cannot read Roost's secrets, and those cannot be "
                f"created here ({exc}). The owner can fix this: {UNAVAILABLE_FIX}."
            ) from None
        loop = asyncio.get_running_loop()
        try:
            transport, proto = await loop.subprocess_exec(
                _Collector,
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir,
                env=command_env(view.home or ctx.workspace, env),
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc}") from exc
        pid = transport.get_pid()
        try:
            try:
                async with asyncio.timeout(timeout):
                    await proto.exited.wait()
            except TimeoutError:
                _kill_group(pid)
                await _settle(proto, _DRAIN_GRACE_S)
                raise ToolError(
                    _report(None, proto.out, proto.err,
                            f"timed out after {timeout:g} s; the command and everything it started were killed")
                ) from None
            except BaseException:  # cancellation (or anything else): no process may outlive us
                _kill_group(pid)
                await asyncio.shield(_settle(proto, _DRAIN_GRACE_S))
                raise
            code = transport.get_returncode()
            if not box.enabled:  # sandboxed, the namespace died with it: its pid may be reused
                _kill_group(pid)  # what it left running in its group dies with it
            complete = await _settle(proto, _DRAIN_GRACE_S)
        finally:
            transport.close()
        if box.enabled and code == SETUP_FAILED and proto.err.head.startswith(b"roost sandbox:"):
            raise ToolError(f"the command did not run: {proto.err.text().strip()}")
        header = f"exit code: {code}"
        if not complete:
            header += " (output cut off: a background process kept it open)"
        return _report(code, proto.out, proto.err, header)

    return Tool(
        "exec",
        "Run a shell command (sh -c) in the workspace and return its exit code, stdout and "
        f"stderr. Default timeout {default_timeout_s:g} s, at most {max_timeout_s:g} s via "
        "timeout_s. It runs in a sandbox: it sees the files of the machine (in a group or a "
        "paired chat: only the system's programs and that chat's own folders, and no network) "
        "but not Roost's own data or processes; /tmp is its own and empty; anything it starts "
        "ends when it ends.",
        ExecInput,
        Risk.EXEC,
        run,
        timeout_s=max_timeout_s + 2 * _DRAIN_GRACE_S + 10.0,
        describe_action=lambda a: a.command,
    )
