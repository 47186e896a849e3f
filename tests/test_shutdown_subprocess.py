"""A real `roost run` process, killed or stopped while messages wait behind a slow answer:
nothing the user was told "got it" about is lost, and nothing is answered twice.

The process talks to the fake Bot API and the fake Messages API over HTTP; its database is
the only evidence across processes, so the tests read it (read-only) to know when the
messages are queued before they pull the plug.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from bot.conversations import KEPT_NOTICE
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, reply_text, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_restart import roost_run

QUEUED = ["second: the milk", "third: the eggs", "fourth: the bread"]
SLOW_START = "Let me think about this carefully, it will take a while."


def joined_answer(body: dict[str, Any]) -> Reply:
    """Answers with every text block of the last user message, in order: shows exactly
    which messages a run was given."""
    blocks = user_blocks(body)
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return reply_text("answer to " + " | ".join(texts))


def answered_once_in_order(tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """Two model requests in all (the slow one and one more); the second was given each
    queued message once, in order, after the cut-off question (still in the transcript,
    unanswered, as context); the chat shows one answer."""
    assert len(fake_api.requests) == 2
    blocks = user_blocks(fake_api.requests[1].json)
    texts = [b["text"] for b in blocks if b.get("type") == "text"]
    assert texts[-len(QUEUED):] == QUEUED
    assert all(texts.count(t) == 1 for t in QUEUED)
    assert answers(tg) == ["answer to " + " | ".join(texts)]


async def inbox_states(db: Path, expected: list[tuple[str, str]], timeout: float = 15.0) -> None:
    """Wait until the other process's inbox holds exactly `expected` (text, state) rows that
    are not done, oldest first."""
    deadline = time.monotonic() + timeout
    rows: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                rows = conn.execute("SELECT text, state FROM inbox WHERE state != 'done' ORDER BY id").fetchall()
            if rows == expected:
                return
        except sqlite3.OperationalError:  # not created or locked yet
            pass
        await asyncio.sleep(0.02)  # timing-ok: re-check a condition in another process
    raise TimeoutError(f"inbox is {rows}, expected {expected}")


async def queue_behind_a_slow_answer(tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic) -> subprocess.Popen[bytes]:
    """Start `roost run`, begin a slow answer, queue three messages behind it."""
    fake_api.script(Reply(Text(SLOW_START, chunk_size=60), Stall(60)))
    fake_api.responder = joined_answer
    process = roost_run(tmp_path, tg, fake_api)
    await tg.await_for(lambda: tg.is_polling, timeout=30)
    tg.send_private(OWNER, "first: what should I buy?")
    await tg.await_for(lambda: any(m.text == SLOW_START for m in tg.bot_messages(OWNER)), timeout=15)
    for text in QUEUED:
        tg.send_private(OWNER, text)
    await tg.await_for(lambda: any("Got it" in (m.text or "") for m in tg.bot_messages(OWNER)), timeout=15)
    await inbox_states(
        tmp_path / "home" / "roost.db",
        [("first: what should I buy?", "running"), *((t, "queued") for t in QUEUED)],
    )
    return process


def stop(process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float = 30) -> int:
    try:
        process.send_signal(sig)
        return process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def answers(tg: FakeTelegram) -> list[str]:
    return [m.text for m in tg.bot_messages(OWNER) if m.text and m.text.startswith("answer to")]


async def test_kill_9_with_messages_queued_loses_none_and_answers_each_once_in_order(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    process = await queue_behind_a_slow_answer(tmp_path, tg, fake_api)
    stop(process, signal.SIGKILL, timeout=10)
    assert len(fake_api.requests) == 1

    async with running(tmp_path, tg, fake_api) as h:
        # The cut-off answer is marked in place; the queued messages get one run, in order.
        await h.bot_text(OWNER, lambda t: t.endswith("(interrupted: Roost restarted)"))
        await h.bot_text(OWNER, lambda t: t.startswith("answer to"), timeout=15)
        await h.app.conversations.lanes.drain()
        answered_once_in_order(tg, fake_api)
        assert await h.app.storage.inbox_rows({"received", "queued", "running"}) == []

    async with running(tmp_path, tg, fake_api) as h:  # and a later start replays nothing
        await h.app.conversations.lanes.drain()
        answered_once_in_order(tg, fake_api)


async def test_sigterm_stops_the_answer_visibly_and_the_next_start_answers_the_queue(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    process = await queue_behind_a_slow_answer(tmp_path, tg, fake_api)
    assert stop(process, signal.SIGTERM) == 0
    texts = [m.text or "" for m in tg.bot_messages(OWNER)]
    assert any(t.startswith(SLOW_START) and "stopped" in t for t in texts), texts
    assert texts.count(KEPT_NOTICE) == 1
    assert not any("send it again" in t for t in texts)
    db = tmp_path / "home" / "roost.db"
    await inbox_states(db, [("first: what should I buy?", "running"), *((t, "queued") for t in QUEUED)])

    process = roost_run(tmp_path, tg, fake_api)  # a real start, through the CLI's wiring
    try:
        await tg.await_for(lambda: answers(tg), timeout=30)
        await inbox_states(db, [])
    finally:
        assert stop(process, signal.SIGINT) == 0  # Ctrl-C with nothing running: a clean exit
    answered_once_in_order(tg, fake_api)
