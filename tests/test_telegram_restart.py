"""A restart mid-stream: `roost run` is killed (SIGKILL) while an answer streams; the next
start edits the cut-off message in place and sends nothing new."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from adapters.render.markdown import render_markdown

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, TOKEN, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_streaming import prose

ROOT = Path(__file__).resolve().parent.parent


def roost_run(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic) -> subprocess.Popen[bytes]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))
    }
    env.update(
        ROOST_HOME=str(tmp_path / "home"),
        ROOST_OWNERS=f'["telegram:{OWNER}"]',
        ROOST_AGENT__MODEL="claude-test",
        ROOST_AGENT__MAX_RETRIES="0",
        ROOST_TELEGRAM__BASE_URL=tg.base_url,
        TELEGRAM_BOT_TOKEN=TOKEN,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=llm.base_url,
    )
    log = open(tmp_path / "roost-run.log", "wb")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env, stdout=log, stderr=log)


async def recorded(db: Path, text: str, timeout: float = 10.0) -> None:
    """Wait until the other process has persisted `text` as a streaming delivery. Its
    database is the only evidence across processes, so this polls it (read-only) with a
    deadline; the condition, not the elapsed time, decides."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                rows = conn.execute("SELECT text FROM deliveries WHERE state = 'streaming'").fetchall()
            if (text,) in rows:
                return
        except sqlite3.OperationalError:  # not created or locked yet
            pass
        await asyncio.sleep(0.02)  # timing-ok: re-check a condition in another process
    raise TimeoutError(f"delivery {text[:40]!r} not recorded within {timeout} s")


async def test_restart_mid_stream_marks_the_cut_off_message_in_place(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    shown = prose(600)
    # The model pauses mid-answer: the process dies while the reply is visibly unfinished.
    fake_api.script(Reply(Text(shown, chunk_size=50), Stall(20), Text(" and then the end.")))
    process = roost_run(tmp_path, tg, fake_api)
    visible = render_markdown(shown).text
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        tg.send_private(OWNER, "tell me a long story")
        message = await tg.await_for(
            lambda: next((m for m in tg.bot_messages(OWNER) if m.text == visible), None), timeout=15
        )
        await recorded(tmp_path / "home" / "roost.db", visible)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    sends_before = len(tg.calls_of("sendMessage"))
    assert sends_before == 1

    async with running(tmp_path, tg, fake_api) as h:
        marked = await h.bot_text(OWNER, lambda t: t.endswith("(interrupted: Roost restarted)"))
        assert marked.message_id == message.message_id
        assert marked.text == visible + "\n\n… (interrupted: Roost restarted)"
        # Nothing sent again; the one new message is the offer to resume (tests/test_resume.py).
        new = [c.params["text"] for c in tg.calls_of("sendMessage")[sends_before:]]
        assert len(new) == 1 and new[0].startswith("I was restarted while working on: tell me a long story")
        assert len(fake_api.requests) == 1  # and the question was not answered twice
        assert not await h.app.storage.unfinished_deliveries()



async def test_shutdown_while_a_finished_runs_reply_closes_never_closes_the_database_under_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic, caplog
) -> None:
    """The run has ended but its reply is still closing (the last edit waits for its pace slot,
    ~1 s) when the process stops. That closing work is shielded from the stop; shutdown must
    wait for it before the database closes, or the reply's records are lost (and the next
    start marks a complete answer as cut off)."""
    story = prose(600)
    fake_api.script(Reply(Text(story, chunk_size=50)))
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "tell me a long story")
        await h.bot_text(OWNER, lambda t: bool(t))  # the first part is out; the rest waits ~1 s
        while await h.app.storage.runs_left_running():  # the run itself has ended
            await asyncio.sleep(0.01)  # timing-ok: polling a condition, bounded by the test timeout
    failed = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert failed == []
    assert tg.bot_messages(OWNER)[-1].text == render_markdown(story).text  # the whole answer
    async with running(tmp_path, tg, fake_api) as h:
        assert not await h.app.storage.unfinished_deliveries()
