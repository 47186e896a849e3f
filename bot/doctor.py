"""`roost doctor`: what is configured, what is missing, and the fix for each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from bot import breaker_report
from bot.settings import Settings, config_path, local_stt_installed

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
    checks += await _model_ids(settings)
    checks.append(_breakers(settings))
    checks += [_owners(settings), _telegram(settings), await _discord(settings)]
    if settings.telegram_bot_token is not None:
        checks.append(await _telegram_privacy(settings))
    checks.append(await _exec_sandbox(settings))
    checks.append(_policy(settings))
    if settings.mcp.servers:
        checks.append(await _mcp(settings))
    checks.append(_voice(settings))
    return checks


def _voice(settings: Settings) -> Check:
    """Read-only: says what voice notes get; it never calls the services (no cost, no key sent)."""
    stt, tts = settings.stt, settings.tts
    if stt.active == "off":
        return Check("voice", "warn", "speech-to-text off: voice notes get a one-line notice, no transcript",
                     "ROOST_STT__BASE_URL=<an OpenAI-compatible API, e.g. https://api.openai.com> (+ ROOST_STT__API_KEY), "
                     "or pip install 'roost[local-stt]' to transcribe on this machine")
    replies = f"voice replies via {tts.base_url} ({tts.voice})" if tts.base_url else "voice replies off (ROOST_TTS__BASE_URL)"
    if stt.active == "local":
        if not local_stt_installed():
            return Check("voice", "fail", "ROOST_STT__ENGINE=local but pocketsphinx is not installed",
                         "pip install 'roost[local-stt]'")
        return Check("voice", "ok", f"voice notes transcribed on this machine (pocketsphinx, en-US); {replies}")
    if not stt.base_url:
        return Check("voice", "fail", "ROOST_STT__ENGINE=openai but ROOST_STT__BASE_URL is not set",
                     "ROOST_STT__BASE_URL=<an OpenAI-compatible API>")
    return Check("voice", "ok", f"voice notes transcribed via {stt.base_url} ({stt.model}); {replies}")


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
    from bot.exec_sandbox import sqlite_file
    from bot.failures import safe_url
    from bot.storage import Storage
    from bot.storage.migrate import current_revision

    url = settings.db_url
    shown = safe_url(url)
    db_file = sqlite_file(url)
    if db_file is not None and not db_file.is_file():  # connecting would create it
        return Check("database", "warn", f"{shown}: not created yet", "roost init")
    try:
        storage = await Storage.open(url, migrate=False)
        try:
            revision = await current_revision(storage.engine)
        finally:
            await storage.aclose()
    except Exception as exc:  # any driver error is a finding here, not a crash
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return Check("database", "fail", f"{shown}: cannot connect ({type(exc).__name__}: {reason})",
                     "check ROOST_DATABASE_URL, or unset it for the embedded SQLite default")
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


async def _model_ids(settings: Settings) -> list[Check]:
    """Each configured model id asked of the models endpoint (GET /v1/models/{id}): one line
    each — exists, unknown, or the key rejected. Skipped without a key (`model` says so)."""
    if settings.anthropic_api_key is None:
        return []
    from agent_core.anthropic_llm import AnthropicLLM
    from agent_core.llm import LLMAuthError, LLMError

    ids = list(dict.fromkeys([settings.agent.model, *settings.agent.fallback_models]))
    client = AnthropicLLM(
        api_key=settings.anthropic_api_key.get_secret_value(), base_url=settings.anthropic_base_url, timeout_s=15.0
    )
    where = settings.anthropic_base_url or "Anthropic's API"
    checks: list[Check] = []
    try:
        for model_id in ids:
            name = f"model id {model_id}"
            try:
                info = await client.model_info(model_id)
            except LLMAuthError:
                checks.append(Check(name, "fail", f"key rejected by {where}", "check ANTHROPIC_API_KEY"))
                continue
            except LLMError as exc:
                checks.append(Check(name, "warn", f"could not ask {where}: {exc}", "check ANTHROPIC_BASE_URL and the network"))
                continue
            except Exception as exc:  # any other failure is a finding here, never a traceback
                checks.append(Check(name, "warn", f"could not ask {where} ({type(exc).__name__})"))
                continue
            if info is None:
                checks.append(Check(name, "fail", f"unknown to {where}",
                                    "fix ROOST_AGENT__MODEL / ROOST_AGENT__FALLBACK_MODELS (/model lists what it offers)"))
                continue
            window = f", window {info.context_window:,} tokens" if info.context_window else ""
            checks.append(Check(name, "ok", f"exists ({info.display_name or model_id}{window})"))
    finally:
        await client.aclose()
    return checks


def _breakers(settings: Settings) -> Check:
    """The circuit breakers as the serving process last reported them (a file it rewrites on
    every change; doctor is another process)."""
    report = breaker_report.read(settings.home_dir / breaker_report.FILE_NAME)
    if report is None:
        return Check("model breakers", "ok", "no failures reported by `roost run`")
    written_at, rows = report
    now = time.time()
    when = datetime.fromtimestamp(written_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    detail = "; ".join(r.describe(now) for r in rows) or "none"
    tripped = [r for r in rows if r.state != "closed"]
    if tripped:
        return Check("model breakers", "warn", f"{detail} (reported {when})",
                     "the fallback models answer meanwhile; check the provider's status page")
    return Check("model breakers", "ok", f"{detail} (reported {when})")


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


async def _telegram_privacy(settings: Settings) -> Check:
    """Asks Telegram (getMe) whether the bot reads all group messages."""
    from adapters.errors import DeliveryError
    from adapters.telegram.bot_info import bot_info

    assert settings.telegram_bot_token is not None
    try:
        info = await bot_info(settings.telegram_bot_token.get_secret_value(), settings.telegram.base_url)
    except DeliveryError as exc:
        return Check("telegram privacy", "warn", f"could not ask Telegram (getMe): {exc}",
                     "check TELEGRAM_BOT_TOKEN and the network")
    if info.can_read_all_group_messages:
        return Check("telegram privacy", "ok", f"@{info.username} reads all group messages "
                     "(privacy mode off): the last 50 messages of a group are its context")
    return Check("telegram privacy", "warn",
                 f"@{info.username} has privacy mode ON: in groups it only sees messages that mention it, "
                 "reply to it or are commands, so a group's 'last 50 messages as context' stays empty",
                 "@BotFather → /setprivacy → your bot → Disable; then remove the bot from each group "
                 "and add it again (Telegram applies the change on re-adding)")


async def _discord(settings: Settings) -> Check:
    if settings.discord_bot_token is None:
        return Check("discord", "warn", "not configured", "DISCORD_BOT_TOKEN=<bot token>")
    from adapters.discord.probe import FIX_INTENT, probe

    dc = settings.discord
    try:
        found = await probe(settings.discord_bot_token.get_secret_value(), dc.api_base)
    except Exception as exc:  # a rejected token or an unreachable server is a finding here
        return Check("discord", "fail", f"cannot log in at {dc.api_base} ({type(exc).__name__})",
                     "check DISCORD_BOT_TOKEN (Developer Portal → Bot → Reset Token) and ROOST_DISCORD__API_BASE")
    if not found.message_content:
        return Check("discord", "warn", f"logged in as {found.bot_name}, but the Message Content intent is off: "
                     "only DMs and mentions are read", FIX_INTENT)
    channels = ", ".join(dc.allowed_channels) or "none (owner can /allow a channel)"
    return Check("discord", "ok", f"logged in as {found.bot_name}, Message Content intent on, channels: {channels}")


async def _exec_sandbox(settings: Settings) -> Check:
    """Starts `true` exactly as `exec` starts a command, in the owner's chat and in a group
    (creates nothing on disk)."""
    from agent_core.builtin_tools.sandbox import ISOLATED_FIX, UNAVAILABLE_FIX, SandboxUnavailable
    from bot.exec_sandbox import exec_sandbox

    sandbox = exec_sandbox(settings)
    if not sandbox.enabled:
        return Check("exec sandbox", "warn",
                     "off (ROOST_AGENT__EXEC_SANDBOX=off): commands run unsandboxed and can read Roost's secrets",
                     "unset ROOST_AGENT__EXEC_SANDBOX where user namespaces are allowed")
    where = settings.workspace_dir
    try:
        await sandbox.probe(where, [where])
    except SandboxUnavailable as exc:
        return Check("exec sandbox", "warn", f"unavailable, so exec refuses to run commands: {exc}",
                     UNAVAILABLE_FIX)
    main = ("commands run in their own user, PID and mount namespaces; Roost's processes, home, "
            "config, database and logs are hidden from them; /tmp is private to each")
    try:
        await sandbox.probe(where, [where], isolated=True)
    except SandboxUnavailable as exc:
        return Check("exec sandbox", "warn", f"{main}; but exec is refused in groups (their commands need "
                     f"network and IPC namespaces of their own): {exc}", ISOLATED_FIX)
    return Check("exec sandbox", "ok", f"{main}; in groups they start from an empty root with only "
                 "the system's programs and the group's folders, and no network")


def _policy(settings: Settings) -> Check:
    """The [policy] in effect (hot-reloaded while running; this is what the file says now)."""
    from agent_core.builtin_tools import default_tools
    from bot.live_config import describe_policy

    from agent_core import web_search

    server = [web_search.NAME] if settings.agent.web_search else []
    lines, warnings = describe_policy(settings.policy, [*(t.name for t in default_tools()), *server])
    detail = " | ".join(lines)
    if warnings:
        return Check("policy", "warn", f"{detail} | {'; '.join(warnings)}", "fix the tool names in [policy] of roost.toml")
    return Check("policy", "ok", detail)


async def _mcp(settings: Settings) -> Check:
    """Each configured MCP server, connected once from here (errors redacted)."""
    from bot.cli_mcp import probe

    states = await probe(settings.mcp)
    detail = "; ".join(
        f"{s.name} {s.state} ({s.tools} tools)" + (f": {s.error}" if s.error else "") for s in states
    )
    bad = [s.name for s in states if s.state != "connected"]
    if bad:
        return Check("mcp", "warn", detail, f"roost mcp test {bad[0]} (Roost runs without it and keeps retrying)")
    return Check("mcp", "ok", detail)
