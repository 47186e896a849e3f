"""What Telegram says about the bot (getMe), for `roost doctor`: its username and whether
privacy mode lets it read every group message.

Privacy mode (BotFather /setprivacy, on by default) decides what a group shows the bot:
with it on, only messages that mention the bot, reply to it or are commands — so the
unmentioned messages Roost keeps as a group's context never arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import Bot
from telegram.error import InvalidToken, TelegramError
from telegram.request import HTTPXRequest

from adapters.errors import DeliveryError
from adapters.telegram.transport import translate


@dataclass(frozen=True, slots=True)
class BotInfo:
    username: str
    can_read_all_group_messages: bool
    """False while privacy mode is on."""


async def bot_info(token: str, base_url: str, *, timeout_s: float = 5.0) -> BotInfo:
    """getMe; raises `DeliveryError` (invalid token, unreachable server, …)."""
    request = HTTPXRequest(connect_timeout=timeout_s, read_timeout=timeout_s)
    bot = Bot(token, base_url=base_url, request=request)
    try:
        async with bot:  # initialize() is the getMe
            me = bot.bot
    except InvalidToken as exc:  # its message quotes the token: never repeat it
        raise DeliveryError("Telegram rejected the bot token (InvalidToken)") from exc
    except TelegramError as exc:
        raise DeliveryError(str(translate(exc)).replace(token, "***")) from exc
    except OSError as exc:  # e.g. a base URL that does not resolve
        raise DeliveryError(f"{type(exc).__name__}: {exc}".replace(token, "***")) from exc
    return BotInfo(me.username or "", bool(me.can_read_all_group_messages))
