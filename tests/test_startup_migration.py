"""`roost run` starts a migration child (`roost init`) only when the database is not at head:
a first start migrates in a child, every restart at head starts serving without one.

A real `roost run` process against the fake Bot API; the probe records each child process it
starts (all of them go through `asyncio.create_subprocess_exec`) in a file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.startup_migration import needs_upgrade
from bot.storage import Storage
from bot.storage.migrate import SCHEMA_HEAD
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, TOKEN, tg  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent

CHILD_PROBE = """
import asyncio, json, os, sys

real = asyncio.create_subprocess_exec

async def recorded(*argv, **kwargs):
    with open(os.environ["ROOST_PROBE_OUT"], "a") as out:
        out.write(json.dumps([str(a) for a in argv]) + "\\n")
    return await real(*argv, **kwargs)

asyncio.create_subprocess_exec = recorded
from bot.cli import main
sys.exit(main(["run"]))
"""


async def start_and_stop(home: Path, tg: FakeTelegram, llm: FakeAnthropic, probe_out: Path) -> list[list[str]]:
    """One `roost run` until it polls, then SIGTERM; the child processes it started."""
    probe_out.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))}
    env.update(ROOST_HOME=str(home), ROOST_OWNERS=f'["telegram:{OWNER}"]', ROOST_TELEGRAM__BASE_URL=tg.base_url,
               TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=llm.base_url,
               ROOST_PROBE_OUT=str(probe_out))
    with (home.parent / "run.log").open("ab") as log:
        process = subprocess.Popen([sys.executable, "-c", CHILD_PROBE], cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            await tg.await_for(lambda: tg.is_polling, timeout=60)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(process.wait, 60) == 0
            await tg.await_for(lambda: not tg.is_polling, timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    return [json.loads(line) for line in probe_out.read_text().splitlines()]


async def test_a_restart_at_head_starts_no_migration_child(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    home, probe_out = tmp_path / "home", tmp_path / "children.jsonl"
    first = await start_and_stop(home, tg, fake_api, probe_out)
    assert [argv[-1] for argv in first] == ["init"]  # a new home: the child made the schema
    with sqlite3.connect(home / "roost.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_HEAD,)]

    assert await start_and_stop(home, tg, fake_api, probe_out) == []
    assert await start_and_stop(home, tg, fake_api, probe_out) == []


async def test_the_schema_check_reads_the_revision_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "roost.db"
    url = f"sqlite+aiosqlite:///{path}"
    assert await needs_upgrade(url) is True  # no file yet
    assert not path.exists()  # the check made none (the child does)
    sqlite3.connect(path).close()
    assert await needs_upgrade(url) is True  # a file without a schema
    async with await Storage.open(url):
        pass
    assert await needs_upgrade(url) is False
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '0001'")
    assert await needs_upgrade(url) is True  # an older schema


@pytest.mark.parametrize("url", ["sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:"])
async def test_an_in_memory_database_is_left_to_storage_open(url: str) -> None:
    assert await needs_upgrade(url) is True  # a new empty database each time: never at head
