"""Which platform adapters the settings enable."""

from __future__ import annotations

from adapters.base import Adapter
from bot.commands import COMMANDS, GROUP_COMMANDS
from bot.settings import Settings


def configured_adapters(settings: Settings) -> list[Adapter]:
    adapters: list[Adapter] = []
    if settings.telegram_bot_token is not None:
        from adapters.telegram import TelegramAdapter  # imported only when used: PTB is heavy

        tg = settings.telegram
        adapters.append(
            TelegramAdapter(
                settings.telegram_bot_token.get_secret_value(),
                base_url=tg.base_url,
                mode=tg.mode,
                webhook_url=tg.webhook_url,
                webhook_listen=tg.webhook_listen,
                webhook_secret=tg.webhook_secret.get_secret_value() if tg.webhook_secret else None,
                commands={**COMMANDS, **GROUP_COMMANDS},
            )
        )
    return adapters
