"""The `exec` tool: a shell command in its own process group, with a timeout after which (or
on cancellation) the whole group is killed, so no grandchild outlives the call."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field

from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError, cap_output

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_TIMEOUT_S = 600.0
RAW_CAP_BYTES = 1024 * 1024
"""Bytes kept per stream (head and tail halves); the rest is counted and dropped."""
_READ_CHUNK = 65_536
_DRAIN_GRACE_S = 2.0
"""After the group is killed, how long to wait for pipes held by escaped processes."""

SECRET_ENV = re.compile(
    r"(TOKEN|SECRET|PASSW|API_?KEY|PRIVATE_?KEY|CREDENTIAL|DATABASE_URL)", re.IGNORECASE
)
"""Environment variables matching this are not passed to commands (they could print them)."""


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


async def _pump(stream: asyncio.StreamReader | None, sink: _CappedBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_READ_CHUNK):
        sink.feed(chunk)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _drain(proc: asyncio.subprocess.Process, pumps: list[asyncio.Task[None]]) -> None:
    """Reap the killed shell and give the readers a moment; readers still blocked on a pipe
    held by an escaped process are cancelled."""
    try:
        async with asyncio.timeout(_DRAIN_GRACE_S):
            await proc.wait()
            await asyncio.gather(*pumps, return_exceptions=True)
    except TimeoutError:
        pass
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


def _report(code: int | None, out: _CappedBuffer, err: _CappedBuffer, header: str) -> str:
    parts = [header]
    if out.total:
        parts.append(f"--- stdout ---\n{out.text().rstrip()}")
    if err.total:
        parts.append(f"--- stderr ---\n{err.text().rstrip()}")
    if not out.total and not err.total and code is not None:
        parts.append("(no output)")
    return cap_output("\n".join(parts))


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if not SECRET_ENV.search(k)}


def make_exec_tool(
    *,
    max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
    default_timeout_s: float = DEFAULT_TIMEOUT_S,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Tool[ExecInput]:
    """Build `exec`. Commands run in `cwd` (default: the session's workspace) with the
    environment minus secrets; `timeout_s` from the model is capped at `max_timeout_s`.

    Result: exit code plus stdout/stderr (1 MB kept per stream, 16,000 characters to the
    model). On timeout the process group is killed and a ToolError says "timed out after
    N s; process group killed" with the partial output. On cancellation the group is killed
    and CancelledError propagates.
    """
    if max_timeout_s <= 0 or default_timeout_s <= 0:
        raise ValueError("exec timeouts must be positive")
    default_timeout_s = min(default_timeout_s, max_timeout_s)
    environment = scrubbed_env(env)

    async def run(args: ExecInput, ctx: ToolContext) -> str:
        timeout = min(args.timeout_s or default_timeout_s, max_timeout_s)
        workdir = cwd if cwd is not None else ctx.workspace
        try:
            proc = await asyncio.create_subprocess_shell(
                args.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir,
                env=environment,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc}") from exc
        out, err = _CappedBuffer(), _CappedBuffer()
        pumps = [
            asyncio.create_task(_pump(proc.stdout, out)),
            asyncio.create_task(_pump(proc.stderr, err)),
        ]
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*pumps)
                code = await proc.wait()
        except TimeoutError:
            _kill_group(proc.pid)
            await _drain(proc, pumps)
            raise ToolError(
                _report(None, out, err, f"timed out after {timeout:g} s; process group killed")
            ) from None
        except BaseException:  # cancellation (or anything else): no process may outlive us
            _kill_group(proc.pid)
            await _drain(proc, pumps)
            raise
        return _report(code, out, err, f"exit code: {code}")

    return Tool(
        "exec",
        "Run a shell command (sh -c) in the workspace and return its exit code, stdout and "
        f"stderr. Default timeout {default_timeout_s:g} s, at most {max_timeout_s:g} s via "
        "timeout_s; on timeout the command and all its children are killed.",
        ExecInput,
        Risk.EXEC,
        run,
        timeout_s=max_timeout_s + _DRAIN_GRACE_S + 10.0,
        describe_action=lambda a: a.command,
    )
