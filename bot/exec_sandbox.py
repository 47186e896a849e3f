"""The `exec` sandbox as configured: which of Roost's own paths commands must never see."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from agent_core.builtin_tools.sandbox import Sandbox
from bot.logs import log_files
from bot.settings import Settings, config_path


def private_paths(settings: Settings) -> list[Path]:
    """Roost's home (the SQLite database, roost.toml), the config file wherever it is, the
    database file if elsewhere, log files, and what the owner added (ROOST_AGENT__EXEC_HIDE).
    The workspace stays visible even inside the home (the sandbox binds it back)."""
    paths = [settings.home_dir, config_path()]
    db = sqlite_file(settings.db_url)
    if db is not None:
        paths.append(db)
    paths += log_files()
    paths += [p.expanduser() for p in settings.agent.exec_hide]
    return paths


def sqlite_file(url: str) -> Path | None:
    try:
        parsed = make_url(url)
    except Exception:  # an unparsable URL fails elsewhere, with a clearer message
        return None
    if not parsed.drivername.startswith("sqlite") or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).expanduser()


def exec_sandbox(settings: Settings) -> Sandbox:
    return Sandbox(hidden=tuple(private_paths(settings)), mode=settings.agent.exec_sandbox)
