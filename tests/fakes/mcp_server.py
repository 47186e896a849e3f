"""A real MCP server for the tests, built with the SDK's server side (`MCPServer`, the
former FastMCP): run as a stdio child or a streamable-HTTP server on 127.0.0.1.

    python -m tests.fakes.mcp_server --record calls.jsonl [--http PORT] [--name notes]

Every call is appended to the record file (one JSON line) *before* it runs, so a test can
prove a denied call never reached the server.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

# A 1×1 PNG: the smallest image block the strict fake Messages API accepts.
PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


TOPICS = ("weather", "invoice", "calendar", "ticket", "deploy", "backup", "contact", "metric", "alert", "wiki")


def build(name: str, record: Path, many: int = 0) -> MCPServer:
    server = MCPServer(name)
    for i in range(many):  # a big server: many tools with realistic descriptions
        topic = TOPICS[i % len(TOPICS)]

        def make(i: int = i, topic: str = topic):  # noqa: ANN202
            def lookup(item_id: str, region: str = "eu", verbose: bool = False, limit: int = 10) -> str:
                note(f"{name}_{topic}_{i:03d}", item_id=item_id)
                return f"{topic} {i} for {item_id}: ok"

            return lookup

        server.add_tool(
            make(), name=f"{topic}_{i:03d}",
            description=f"Look up a {topic} record number {i} by its id in the {name} system. Returns the "
            f"record's fields, its history and related {topic} records; region selects the data centre, "
            "verbose adds raw payloads, limit caps related records.",
        )  # fmt: skip

    def note(tool: str, **args: object) -> None:
        with record.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")

    @server.tool(description="Search the notes for a query.")
    def search(query: str, limit: int = 5) -> str:
        note("search", query=query, limit=limit)
        return f"found 1 note for {query!r}: 'buy milk'"

    @server.tool(description="Get one note by id.")
    def get_note(id: int) -> str:
        note("get_note", id=id)
        return f"note {id}: buy milk"

    @server.tool(description="Delete a note.")
    def delete_note(id: int) -> str:
        note("delete_note", id=id)
        return "deleted"

    @server.tool(description="A picture of the note.")
    def picture() -> Image:
        note("picture")
        return Image(data=PNG_1PX, format="png")

    @server.tool(description="Sleep for a while.")
    async def slow(seconds: float) -> str:
        note("slow", seconds=seconds)
        await asyncio.sleep(seconds)
        return "woke up"

    @server.tool(description="Fail on purpose.")
    def broken() -> str:
        note("broken")
        raise ValueError("the notes database is locked")

    @server.tool(description="The names of the environment variables this server sees.")
    def environment() -> str:
        note("environment")
        return json.dumps(sorted(os.environ))

    @server.tool(description="The value of one environment variable (to prove it is redacted).")
    def echo_env(name: str) -> str:
        note("echo_env", name=name)
        return f"{name}={os.environ.get(name, '')}"

    @server.tool(description="Add a tool named `name` and tell the client the list changed.")
    async def add_tool(name: str, ctx: Context) -> str:
        note("add_tool", name=name)

        def added() -> str:
            note(name)
            return f"{name} ran"

        server.add_tool(added, name=name, description=f"A tool added at runtime: {name}.")
        await ctx.session.send_tool_list_changed()
        return "added"

    @server.tool(description="Exit the server process at once.")
    def crash() -> str:
        note("crash")
        os._exit(3)

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    parser.add_argument("--sse", type=int, default=0, help="serve the old HTTP+SSE transport on this port")
    parser.add_argument("--name", default="notes")
    parser.add_argument("--many", type=int, default=0, help="also serve this many generated tools")
    args = parser.parse_args()
    server = build(args.name, args.record, args.many)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse:
        server.run("sse", host="127.0.0.1", port=args.sse)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
