"""What the replica tests share: several Roost apps (or `roost run` processes) on one
PostgreSQL database, fed through their own webhook ports as a load balancer would, and
waits on conditions in the database, in an app or in another process's log."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, reply_text, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.roost_process import start_roost_run
from tests.storage_fixtures import _asyncpg_dsn
from tests.telegram_harness import OWNER, Harness, free_port, running

SECRET = "replica-secret_0123456789"


@contextlib.asynccontextmanager
async def webhook_replicas(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, url: str, count: int, **overrides: Any
) -> AsyncIterator[list[tuple[Harness, str]]]:
    """`count` full apps in this process on the database `url` (each its own engine,
    connections, webhook server and lanes; one shared workspace): (harness, webhook URL)."""
    async with contextlib.AsyncExitStack() as stack:
        started: list[tuple[Harness, str]] = []
        for i in range(count):
            port = free_port()
            hook = f"http://127.0.0.1:{port}/tg/hook"
            telegram = {"mode": "webhook", "webhook_url": hook, "webhook_listen": f"127.0.0.1:{port}",
                        "webhook_secret": SECRET}
            h = await stack.enter_async_context(running(
                tmp_path / f"replica-{i}", tg, llm, paced=False, telegram=telegram, database_url=url,
                workspace=tmp_path / "workspace", **overrides,
            ))  # fmt: skip
            started.append((h, hook))
        yield started


def roost_process(
    tmp_path: Path, name: str, url: str, llm: FakeAnthropic, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """A real `roost run` replica on the database `url` (its own ROOST_HOME, the shared
    workspace), with the platform settings `env`; its output goes to `<name>.log`."""
    log = tmp_path / f"{name}.log"
    process = start_roost_run(
        log,
        ROOST_HOME=str(tmp_path / name),
        ROOST_WORKSPACE=str(tmp_path / "workspace"),
        ROOST_DATABASE_URL=url,
        ROOST_AGENT__MODEL="claude-test",
        ROOST_AGENT__MAX_RETRIES="0",
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=llm.base_url,
        **env,
    )
    return process, log


async def logged(log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.05)  # timing-ok: re-check another process's log


def ended(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        process.send_signal(sig)
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def until(condition: Callable[[], Any], timeout: float = 30, what: str = "the condition") -> None:
    """Wait for `condition` (a function, or a coroutine function) of an app or the database:
    not of a fake, whose own `await_for` wakes on its events."""
    deadline = time.monotonic() + timeout
    while not ((await held) if inspect.isawaitable(held := condition()) else held):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.02)  # timing-ok: re-check a condition in the database / an app


async def inbox_states(url: str, expected: list[tuple[str, str]], timeout: float = 30) -> None:
    """Wait until the inbox's unanswered rows are `expected` ((text, state), oldest first)."""
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
    rows: list[tuple[Any, ...]] = []

    async def matches() -> bool:
        nonlocal rows
        rows = [tuple(r) for r in await conn.fetch("SELECT text, state FROM inbox WHERE state != 'done' ORDER BY id")]
        return rows == expected

    try:
        await until(matches, timeout, f"the inbox {expected} (it is {rows})")
    finally:
        await conn.close()


def texts_answer(body: dict[str, Any]) -> Reply:
    """Answers naming the newest user message's texts."""
    texts = [b["text"] for b in user_blocks(body) if isinstance(b, dict) and b.get("type") == "text"]
    return reply_text("answer to " + " | ".join(texts))


def dm(update_id: int, text: str, user: int = OWNER, name: str = "Olivia") -> dict[str, Any]:
    """A private message as Telegram posts it to a webhook."""
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": int(time.time()), "text": text,
        "chat": {"id": user, "type": "private", "first_name": name},
        "from": {"id": user, "is_bot": False, "first_name": name},
    }}  # fmt: skip
