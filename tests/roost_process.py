"""A real `roost run` child process for the tests that kill, signal or race one: its
environment holds only the settings the test gives (none of this shell's Roost, platform
or API variables), and its output goes to a log file the test reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_OWN_PREFIXES = ("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_")


def start_roost_run(log: Path, **settings: str) -> subprocess.Popen[bytes]:
    """`python -m bot.cli run` with `settings` as its Roost environment, writing to `log`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    env.update(settings)
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env, stdout=out, stderr=out)
