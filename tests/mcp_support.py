"""Real MCP servers for the tests (tests/fakes/mcp_server.py) and waits on their links."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bot.mcp_servers import McpManager

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 30.0


def stdio_server(record: Path, **extra: Any) -> dict[str, Any]:
    """roost.toml's `[mcp.servers.<name>]` for the test server as a stdio child."""
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", "--record", str(record)],
            "cwd": str(ROOT), **extra}  # fmt: skip


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(record: Path, port: int, *, sse: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """The test server over streamable HTTP (or the old HTTP+SSE) on 127.0.0.1:port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server", "--record", str(record), "--sse" if sse else "--http", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


async def listening(port: int, timeout_s: float = WAIT_S) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)  # polling a port that is not yet bound; bounded above
                continue
            writer.close()
            return


async def settled(manager: McpManager, name: str, *, connects: int = 1, timeout_s: float = WAIT_S) -> str:
    """Wait until the server connected `connects` times or failed; returns its state."""
    return await manager.links[name].settled(timeout_s, connects=connects)
