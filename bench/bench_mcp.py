"""MCP tool-call overhead (stdio and streamable HTTP) against a built-in tool, and the size of
the tool definitions sent with 200 MCP tools, lazy (find_tools) vs eager.

Run: .venv/bin/python bench/bench_mcp.py [--calls 200]

Calls go through the tool function as the runner calls it (the server is the test server of
tests/fakes/mcp_server.py on this machine), so the figures are Roost's + the SDK's + the
transport's overhead; policy, approval and audit cost the same for every tool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.builtin_tools import default_tools  # noqa: E402
from agent_core.policy import Policy  # noqa: E402
from agent_core.risk import Scope  # noqa: E402
from agent_core.tools import ToolContext, ToolRegistry  # noqa: E402
from bot.mcp_servers import McpManager  # noqa: E402
from bot.mcp_settings import McpSettings  # noqa: E402
from tests.mcp_support import free_port, http_server, listening, stdio_server  # noqa: E402

STANDARD = ["search", "get_note", "delete_note", "picture", "slow", "broken", "environment", "echo_env", "add_tool", "crash"]


async def timed(tool, args: dict, ctx: ToolContext, n: int) -> list[float]:  # noqa: ANN001
    parsed = tool.input_model.model_validate(args)
    await tool.func(parsed, ctx)  # warm
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await tool.func(parsed, ctx)
        out.append((time.perf_counter() - start) * 1000)
    return out


def line(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    return f"{name:>10}: p50 {statistics.median(ms):7.2f} ms   p95 {ms[int(len(ms) * 0.95) - 1]:7.2f} ms"


async def main(calls: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    ctx = ToolContext("main", Scope.MAIN, tmp)
    (tmp / "a.txt").write_text("x")
    builtin = next(t for t in default_tools() if t.name == "list_dir")
    print(line("built-in", await timed(builtin, {"path": "."}, ctx, calls)))

    port = free_port()
    with http_server(tmp / "http.jsonl", port):
        await listening(port)
        registry = ToolRegistry()
        manager = McpManager(registry, Policy)
        await manager.apply(McpSettings.model_validate({"servers": {
            "stdio": {**stdio_server(tmp / "stdio.jsonl"), "risk": "read"},
            "http": {"url": f"http://127.0.0.1:{port}/mcp", "risk": "read"},
        }}))  # fmt: skip
        for link in manager.links.values():
            assert await link.settled(30) == "connected", link.error
        for name in ("stdio", "http"):
            tool = registry.get(f"mcp__{name}__search")
            print(line(f"mcp {name}", await timed(tool, {"query": "milk"}, ctx, calls)))
        await manager.aclose()

    registry = ToolRegistry(default_tools())
    manager = McpManager(registry, Policy)
    servers = {
        f"s{n}": {**stdio_server(tmp / "many.jsonl", tools={"exclude": STANDARD}),
                  "args": ["-m", "tests.fakes.mcp_server", "--record", str(tmp / "many.jsonl"), "--many", "50"]}
        for n in range(4)
    }  # fmt: skip
    await manager.apply(McpSettings.model_validate({"servers": servers}))
    for link in manager.links.values():
        assert await link.settled(60) == "connected", link.error
    every = registry.schemas()
    eager = sum(len(json.dumps(s)) for s in every if s["name"] != "find_tools")
    lazy = sum(len(json.dumps(s)) for s in registry.schemas_of(registry.offered(Scope.MAIN, "main")))
    builtin_bytes = sum(len(json.dumps(s)) for s in every if not s["name"].startswith("mcp__") and s["name"] != "find_tools")
    print(f"200 MCP tools: tool definitions eager {eager:,} bytes, lazy {lazy:,} bytes "
          f"(built-in tools alone {builtin_bytes:,}; MCP part {eager - builtin_bytes:,} → {lazy - builtin_bytes:,})")
    await manager.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
