"""`roost mcp list | tools NAME | test NAME`: the configured MCP servers, connected from this
process (a running `roost run` keeps its own connections). Nothing printed holds a `${VAR}`
value: targets are shown as configured, errors pass the server's redaction."""

from __future__ import annotations

import argparse
import asyncio
import time

from agent_core.policy import Policy
from agent_core.tools import ToolRegistry
from bot.mcp_servers import McpManager, ServerState, tool_name
from bot.mcp_settings import McpServerSettings, McpSettings
from bot.settings import Settings

CONNECT_WAIT_S = 30.0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    mcp = sub.add_parser("mcp", help="MCP servers: list, their tools, test a connection")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", required=True)
    mcp_sub.add_parser("list", help="servers, state, tool counts, last error")
    tools = mcp_sub.add_parser("tools", help="one server's tools as the model sees them, with risk classes")
    tools.add_argument("name")
    test = mcp_sub.add_parser("test", help="connect to one server and list its tools (exit 1 on failure)")
    test.add_argument("name")


def target(config: McpServerSettings) -> str:
    """Where the server is, as configured (`${VAR}` unresolved)."""
    if config.url is not None:
        return config.url
    return " ".join([config.command or "", *config.args])


def state_line(state: ServerState, config: McpServerSettings) -> str:
    line = f"{state.name}: {state.state} ({state.transport}, {state.tools} tools, risk {config.risk}) — {target(config)}"
    return f"{line}\n    last error: {state.error}" if state.error else line


async def probe(mcp: McpSettings) -> list[ServerState]:
    """Connect to every server once (concurrently, at most CONNECT_WAIT_S) and report."""
    manager = McpManager(ToolRegistry(), Policy, backoff_min_s=CONNECT_WAIT_S)
    try:
        await manager.apply(mcp)
        await asyncio.gather(*(link.settled(CONNECT_WAIT_S) for link in manager.links.values()))
        return manager.states()
    finally:
        await manager.aclose()


async def run(settings: Settings, args: argparse.Namespace) -> int:
    servers = settings.mcp.servers
    if args.mcp_command == "list":
        if not servers:
            print("No MCP servers configured ([mcp.servers.<name>] in roost.toml).")
            return 0
        chosen = servers
    else:
        if args.name not in servers:
            known = ", ".join(servers) or "none"
            print(f"roost: no MCP server {args.name!r} in [mcp.servers] (configured: {known})")
            return 2
        chosen = {args.name: servers[args.name]}
    registry = ToolRegistry()
    manager = McpManager(registry, Policy, backoff_min_s=CONNECT_WAIT_S)  # one attempt each
    started = time.monotonic()
    try:
        await manager.apply(McpSettings(servers=chosen))
        await asyncio.gather(*(link.settled(CONNECT_WAIT_S) for link in manager.links.values()))
        took = time.monotonic() - started
        states = manager.states()
        if args.mcp_command == "list":
            for state in states:
                print(state_line(state, servers[state.name]))
            return 0
        (state,) = states
        link, config = manager.links[args.name], servers[args.name]
        if args.mcp_command == "test":
            print(state_line(state, config))
            if state.state == "connected":
                print(f"    connected in {took:.1f} s; tools: {', '.join(t.name for t in link.tools) or 'none'}")
            return 0 if state.state == "connected" else 1
        if state.state != "connected":
            print(state_line(state, config))
            return 1
        for listed in link.tools:
            first = (listed.description or "").strip().splitlines()[:1]
            print(f"{tool_name(args.name, listed.name)}  [{config.risk_for(listed.name).value}]  {first[0] if first else ''}")
        return 0
    finally:
        await manager.aclose()
