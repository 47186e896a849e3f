"""Which platform adapters the settings enable, and how each is built from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adapters.base import Adapter
from agent_core.inbound import Inbound
from bot.commands import COMMANDS, GROUP_COMMANDS
from bot.lean_imports import hidden
from bot.roles import IsAdmin
from bot.settings import Settings

if TYPE_CHECKING:
    from adapters.discord import DiscordAdapter
    from adapters.telegram import TelegramAdapter


def configured_adapters(settings: Settings, *, lean: bool = False) -> list[Adapter]:
    """`lean` (the serving process only): a Telegram bot that polls imports PTB without its
    webhook server, tornado (~3 MB held for good, bench/bench_rss.py). PTB decides at import
    whether webhooks are available, so a process that may later need them (tests) leaves it."""
    adapters: list[Adapter] = []
    if settings.telegram_bot_token is not None:
        with hidden("tornado", when=lean and settings.telegram.mode == "polling", unless_loaded=("telegram.ext",)):
            adapters.append(telegram_adapter(settings))
    if settings.discord_bot_token is not None:
        adapters.append(discord_adapter(settings))
    return adapters


def telegram_adapter(settings: Settings, **extra: Any) -> TelegramAdapter:
    """The Telegram adapter for these settings; `extra` are its optional keyword arguments
    (tests pass plain-HTTP request objects and pacing)."""
    from adapters.telegram import TelegramAdapter  # imported only when used: PTB is heavy

    tg = settings.telegram
    assert settings.telegram_bot_token is not None, "TELEGRAM_BOT_TOKEN is not set"
    return TelegramAdapter(
        settings.telegram_bot_token.get_secret_value(),
        base_url=tg.base_url,
        base_file_url=tg.base_file_url,
        mode=tg.mode,
        webhook_url=tg.webhook_url,
        webhook_listen=tg.webhook_listen,
        webhook_secret=tg.webhook_secret.get_secret_value() if tg.webhook_secret else None,
        commands={**COMMANDS, **GROUP_COMMANDS},
        **extra,
    )


def discord_adapter(settings: Settings, **extra: Any) -> DiscordAdapter:
    """The Discord adapter for these settings; `extra` are its optional keyword arguments."""
    from adapters.discord import DiscordAdapter  # imported only when used

    dc = settings.discord
    assert settings.discord_bot_token is not None, "DISCORD_BOT_TOKEN is not set"
    return DiscordAdapter(
        settings.discord_bot_token.get_secret_value(),
        api_base=dc.api_base,
        gateway_url=dc.gateway_url,
        commands={name: text for name, text in {**COMMANDS, **GROUP_COMMANDS}.items() if name != "start"},
        **extra,
    )


def group_admins(adapters: Sequence[Adapter]) -> IsAdmin:
    """`GroupCommandPolicy`'s admin check: asks the sender's platform (its adapter caches
    the answer). A platform that cannot say counts no admins; one whose check fails raises,
    and the policy refuses."""
    by_platform = {a.platform: a for a in adapters}

    async def is_admin(inbound: Inbound) -> bool:
        adapter = by_platform.get(inbound.platform)
        check = getattr(adapter, "is_chat_admin", None)  # adapters still without it: no admins
        if inbound.chat_kind != "group" or check is None:
            return False
        return bool(await check(inbound.chat_id, inbound.sender_id))

    return is_admin
