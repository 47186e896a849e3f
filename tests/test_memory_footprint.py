"""A serving process keeps out the modules it never uses (bench/bench_rss.py measures the MB).

Each check runs in a fresh interpreter: pytest itself may have loaded the modules in question.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
        "print(json.dumps({m: m in sys.modules for m in ('yaml', 'pygments', 'alembic')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.splitlines()[-1]) == {"yaml": False, "pygments": False, "alembic": False}
