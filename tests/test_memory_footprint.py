"""A serving process keeps out the modules it never uses (bench/bench_rss.py measures the MB).

Each check runs in a fresh interpreter: pytest itself may have loaded the modules in question.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from bot.storage.migrate import SCHEMA_HEAD
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, TOKEN, tg  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import asyncio, json, sys
from bot.storage import Storage

async def main(url):
    storage = await Storage.open(url)
    await storage.aclose()

asyncio.run(main(sys.argv[1]))
first = {m: m in sys.modules for m in ("pygments", "sqlalchemy.dialects.postgresql")}
import mako.exceptions
first["mako_fell_back"] = mako.exceptions.pygments_html_formatter is None
print(json.dumps(first))
"""

AT_HEAD = """
import asyncio, json, sys
from bot.storage import Storage

async def main(url):
    storage = await Storage.open(url)
    await storage.aclose()

asyncio.run(main(sys.argv[1]))
print(json.dumps({m: m in sys.modules for m in ("alembic", "sqlalchemy.dialects.postgresql")}))
"""


def _probe(code: str, url: str) -> dict[str, bool]:
    out = subprocess.run([sys.executable, "-c", code, url], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_first_start_migrating_does_not_load_pygments(tmp_path: Path) -> None:
    # Alembic's mako templates import pygments only to colour their own error pages: ~4.5 MB
    # held for the life of `roost run` after a first start.
    seen = _probe(PROBE, f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    assert seen["pygments"] is False
    assert seen["mako_fell_back"] is True


def test_sqlite_at_head_loads_neither_alembic_nor_the_postgresql_dialect(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}"
    _probe(PROBE, url)  # migrate once
    seen = _probe(AT_HEAD, url)
    assert seen == {"alembic": False, "sqlalchemy.dialects.postgresql": False}


def test_serving_imports_leave_out_yaml() -> None:
    # PyYAML parses skills' front matter only: a workspace without skills never needs it.
    code = (
        "import json, sys\n"
        "import bot.cli, bot.app, bot.platforms, adapters.telegram\n"
        "print(json.dumps({m: m in sys.modules for m in ('yaml', 'pygments', 'alembic', 'mcp', 'click')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    # mcp (the SDK) loads only once an [mcp] server is configured; click is its dependency
    # that made httpx load its CLI (bot/__init__.py).
    assert json.loads(out.stdout.splitlines()[-1]) == {
        "yaml": False, "pygments": False, "alembic": False, "mcp": False, "click": False
    }


# -- the serving process itself (a real `roost run` against the fake Bot API) ----------------

SERVING_PROBE = """
import atexit, json, os, sys

def report():
    names = ("anthropic", "alembic", "mako", "tornado", "aiohttp", "discord", "adapters.discord", "pygments",
             "PIL", "av", "pypdf", "trio", "attr")
    with open(os.environ["ROOST_PROBE_OUT"], "w") as out:
        json.dump({m: m in sys.modules for m in names}, out)

atexit.register(report)
from bot.cli import main
sys.exit(main(["run"]))
"""


def _serving_env(home: Path, tg: FakeTelegram, llm: FakeAnthropic, probe_out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))}
    env.update(
        ROOST_HOME=str(home),
        ROOST_OWNERS=f'["telegram:{OWNER}"]',
        ROOST_TELEGRAM__BASE_URL=tg.base_url,
        TELEGRAM_BOT_TOKEN=TOKEN,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=llm.base_url,
        ROOST_PROBE_OUT=str(probe_out),
    )
    return env


async def test_first_start_of_a_telegram_bot_answers_without_alembic_tornado_aiohttp_or_discord(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    # A new home: the schema is created by a child `roost init`, so Alembic and mako (~10 MB)
    # never load here; a polling bot needs no webhook server (tornado, ~3 MB); discord.py is
    # for Discord only; the anthropic SDK's optional aiohttp transport (~8 MB) is never used.
    fake_api.script(Reply(Text("pong")))
    home, probe_out = tmp_path / "home", tmp_path / "modules.json"
    log = (tmp_path / "run.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", SERVING_PROBE], cwd=ROOT,
                               env=_serving_env(home, tg, fake_api, probe_out), stdout=log, stderr=log)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=60)
        tg.send_private(OWNER, "ping")  # answered through the SDK: it is loaded, and works
        await tg.await_for(lambda: any(m.text == "pong" for m in tg.bot_messages(OWNER)), timeout=60)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    assert json.loads(probe_out.read_text()) == {
        "anthropic": True, "alembic": False, "aiohttp": False, "mako": False, "tornado": False, "discord": False, "adapters.discord": False,
        "pygments": False, "PIL": False, "av": False, "pypdf": False,  # loaded only when media arrives
        "trio": False, "attr": False,  # installed beside Roost by selenium; never loaded by it
    }
    with sqlite3.connect(home / "roost.db") as db:  # migrated all the same, by the child
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_HEAD,)]


def test_database_from_a_newer_roost_stops_run_in_one_line(tmp_path: Path) -> None:
    # The child's migration fails (a revision this code does not know): `roost run` says so in
    # one line with the child's reason, no traceback, and never starts serving.
    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "roost.db") as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        db.execute("INSERT INTO alembic_version VALUES ('9999')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))}
    env.update(ROOST_HOME=str(home), ROOST_OWNERS=f'["telegram:{OWNER}"]', TELEGRAM_BOT_TOKEN=TOKEN,
               ROOST_TELEGRAM__BASE_URL="http://127.0.0.1:9/")  # never reached
    result = subprocess.run([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("roost: the database could not be migrated: ")
    assert "9999" in lines[0] and TOKEN not in lines[0]
