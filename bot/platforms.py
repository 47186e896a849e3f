"""Which platform adapters the settings enable."""

from __future__ import annotations

from adapters.base import Adapter
from bot.settings import Settings


def configured_adapters(settings: Settings) -> list[Adapter]:
    adapters: list[Adapter] = []
    if settings.telegram_bot_token is not None:
        from adapters.telegram import TelegramAdapter  # imported only when used: PTB is heavy

        adapters.append(TelegramAdapter.from_settings(settings.telegram, settings.telegram_bot_token))
    return adapters
