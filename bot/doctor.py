"""`roost doctor`: what is configured, what is missing, and the fix for each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.settings import Settings, config_path

Status = Literal["ok", "warn", "fail"]

WORKSPACE_FILES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "USER.md", "MEMORY.md", "HEARTBEAT.md")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


async def run_checks(settings: Settings) -> list[Check]:
    checks = [_config(settings), _workspace(settings), await _database(settings), _model(settings)]
    checks += [_owners(settings), _telegram(settings), _discord(settings)]
    return checks


def _config(settings: Settings) -> Check:
    path = config_path()
    where = f"{path}" if path.is_file() else "environment only (no roost.toml)"
    return Check("configuration", "ok", f"valid; read from {where}; home {settings.home_dir}")


def _workspace(settings: Settings) -> Check:
    root = settings.workspace_dir
    if not root.is_dir():
        return Check("workspace", "fail", f"{root} does not exist", "roost init")
    missing = [name for name in WORKSPACE_FILES if not (root / name).is_file()]
    if missing:
        return Check("workspace", "warn", f"{root}: missing {', '.join(missing)}", "roost init (never overwrites)")
    return Check("workspace", "ok", str(root))


async def _database(settings: Settings) -> Check:
    from bot.storage import Storage
    from bot.storage.migrate import current_revision

    url = settings.db_url
    shown = url.split("@")[-1] if "@" in url else url
    try:
        storage = await Storage.open(url, migrate=False)
    except Exception as exc:  # any driver error is a finding here, not a crash
        return Check("database", "fail", f"{shown}: cannot connect ({type(exc).__name__}: {exc})",
                     "check ROOST_DATABASE_URL, or unset it for the embedded SQLite default")
    try:
        revision = await current_revision(storage.engine)
    finally:
        await storage.aclose()
    if revision is None:
        return Check("database", "warn", f"{shown}: reachable, schema not created yet", "roost init")
    return Check("database", "ok", f"{shown} (schema {revision})")


def _model(settings: Settings) -> Check:
    if settings.anthropic_api_key is None:
        return Check("model", "fail", f"ANTHROPIC_API_KEY is not set (model {settings.agent.model})",
                     "export ANTHROPIC_API_KEY=<key> (and ANTHROPIC_BASE_URL for a compatible endpoint)")
    base = settings.anthropic_base_url or "Anthropic's API"
    fallbacks = ", ".join(settings.agent.fallback_models) or "none"
    return Check("model", "ok", f"{settings.agent.model} via {base}; fallbacks: {fallbacks}")


def _owners(settings: Settings) -> Check:
    if not settings.owners:
        return Check("owners", "warn", "no owner set: nobody gets the main session in chats",
                     """ROOST_OWNERS='["telegram:<your user id>"]'""")
    return Check("owners", "ok", ", ".join(settings.owners))


def _telegram(settings: Settings) -> Check:
    if settings.telegram_bot_token is None:
        return Check("telegram", "warn", "not configured", "TELEGRAM_BOT_TOKEN=<token from @BotFather>")
    tg = settings.telegram
    groups = ", ".join(tg.allowed_groups) or "none (owner can /allow a group)"
    return Check("telegram", "ok", f"token set, {tg.mode} mode, groups: {groups}")


def _discord(settings: Settings) -> Check:
    if settings.discord_bot_token is None:
        return Check("discord", "warn", "not configured", "DISCORD_BOT_TOKEN=<bot token>")
    return Check("discord", "warn", "token set, but the Discord adapter is not built yet", "")
