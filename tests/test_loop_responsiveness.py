"""One user's heavy tool call must not stall everyone: CPU-heavy work runs off the event loop.

Reproduced: `web_fetch` parsed HTML on the loop, and a 2 MB page stalled every chat for
~8 s. A ticker measures the loop's lateness against its own monotonic schedule while the
heavy work runs; a stall shows up as one late tick as long as the stall.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from agent_core.builtin_tools.web import WebFetchInput, make_web_fetch_tool
from agent_core.risk import Scope
from agent_core.tools import ToolContext
from bot.heap import freeze_long_lived
from workspace.memory_index import MemoryIndex, create_memory_tables

MAX_LATENESS_S = 0.100
TICK_S = 0.010
UNIT = b"<div class='c'><p>Some words here <a href='/x/1'>a link</a> and <b>bold</b> text.</p></div>\n"
BIG_PAGE = b"<html><head><title>Big</title></head><body>" + UNIT * 22_000 + b"</body></html>"


@dataclass
class Ticker:
    """Wakes every TICK_S on a schedule fixed at start (loop.time(), monotonic) and keeps
    the worst lateness seen."""

    max_late: float = 0.0
    ticks: int = 0
    ticked: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            self.ticks += 1
            due = start + self.ticks * TICK_S
            await asyncio.sleep(max(0.0, due - loop.time()))
            self.max_late = max(self.max_late, loop.time() - due)
            self.ticked.set()

    async def next_tick(self) -> None:
        """Wait for a tick measured after this call: a stall that just ended is counted."""
        self.ticked.clear()
        await asyncio.wait_for(self.ticked.wait(), 10)


async def idle_lateness(seconds: float) -> float:
    """The worst lateness of an idle loop on this machine right now: what the OS scheduler
    adds by itself on a loaded machine (tens of ms on a busy 2-core runner)."""
    _, ticker, _ = await measured(asyncio.sleep(seconds))
    return ticker.max_late


def assert_responsive(ticker: Ticker, idle: float) -> None:
    """No tick later than MAX_LATENESS_S beyond what an idle loop saw just before."""
    assert ticker.max_late < MAX_LATENESS_S + idle, (
        f"a tick was {ticker.max_late * 1000:.0f} ms late (idle loop: {idle * 1000:.0f} ms)")


async def measured(work: Awaitable[Any]) -> tuple[Any, Ticker, float]:
    ticker = Ticker()
    task = asyncio.create_task(ticker.run())
    await asyncio.sleep(TICK_S * 3)  # the ticker is running before the work starts
    started = time.monotonic()
    try:
        result = await work
        elapsed = time.monotonic() - started
        await ticker.next_tick()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return result, ticker, elapsed


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        page = BIG_PAGE if self.path == "/big" else b"<html><title>small</title><p>hi</p></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)


@pytest.fixture
def big_page_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/big"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


async def test_web_fetch_of_a_big_page_never_stalls_the_loop(big_page_server: str) -> None:
    # Loopback is allowed the way tests/test_tools_web.py does it.
    tool = make_web_fetch_tool(allowed_hosts=["127.0.0.1"])
    ctx = ToolContext(session_key="group:telegram:-1", scope=Scope.SUB, workspace=Path("."))
    # One small fetch first: the HTTP stack's one-time imports (done at start-up in a
    # running Roost, whose Telegram client uses the same stack) are not what is measured.
    await tool.func(WebFetchInput(url=big_page_server.replace("/big", "/small")), ctx)
    idle = await idle_lateness(1.0)
    out, ticker, elapsed = await measured(tool.func(WebFetchInput(url=big_page_server), ctx))
    assert out.startswith(f"URL: {big_page_server}\nTitle: Big")
    assert "[a link](" in out and "read the first 524,288 bytes of markup" in out
    # The parse is real work: on the loop it alone would make a tick this late.
    assert elapsed > 2 * MAX_LATENESS_S, elapsed
    assert_responsive(ticker, idle)
    assert ticker.ticks > 10


async def test_memory_index_of_big_files_never_stalls_the_loop(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    line = "- met Alice about the garden; she likes tulips and long walks\n"
    for day in range(1, 29):
        (memory / f"2026-01-{day:02d}.md").write_text(line * 12_000)  # ~0.7 MB each
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    try:
        async with engine.begin() as conn:
            await conn.run_sync(create_memory_tables)
        index = MemoryIndex(engine, tmp_path)
        freeze_long_lived()  # as `roost run` does once start-up is done
        idle = await idle_lateness(1.0)
        stats, ticker, elapsed = await measured(index.sync())
    finally:
        await engine.dispose()
    assert stats.indexed == 28
    assert elapsed > 2 * MAX_LATENESS_S, elapsed
    assert_responsive(ticker, idle)
