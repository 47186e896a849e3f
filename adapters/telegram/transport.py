"""`ChatTransport` over python-telegram-bot's `Bot`: one chat (and forum topic), PTB errors
translated into the `adapters.errors` tree at this boundary.

Translation (descriptions matched case-insensitively: PTB strips "Bad Request: " and
re-capitalizes what follows):

    RetryAfter                                   → RateLimited(retry_after seconds)
    BadRequest "message is not modified"         → success (the message already shows it)
    BadRequest "can't parse entities"            → FormattingRejected
    BadRequest "message is too long"             → MessageTooLong
    BadRequest "message to edit/delete not found"→ MessageGone
    any other TelegramError                      → DeliveryError

No pacing and no retries here: the adapter's `Outbox` owns both.
"""

from __future__ import annotations

import datetime as dtm
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    LinkPreviewOptions,
    Message,
    MessageEntity,
    ReplyParameters,
)
from telegram.constants import ChatAction
from telegram.error import BadRequest, RetryAfter, TelegramError

from adapters.errors import DeliveryError, FormattingRejected, MessageGone, MessageTooLong, RateLimited
from adapters.render.entities import Entity
from adapters.render.utf16 import Unit

TELEGRAM_LIMIT_UNITS = 4096
EDIT_INTERVAL_S = 1.05
"""Seconds between requests in one private chat. Telegram's rule is 1.0 s; the extra 50 ms
absorbs request latency jitter so Telegram itself never sees two requests closer than 1.0 s."""
GROUP_INTERVAL_S = 3.05
"""Seconds between requests in one group: Telegram allows a bot 20 messages a minute per
group. Pacing at that rate ourselves keeps PTB's per-group limiter from ever sleeping
inside a request, which would tie up one of the outbox's few workers for seconds."""

Keyboard = Sequence[Sequence[tuple[str, str]]]
"""Rows of (label, callback_data) inline buttons; callback_data already ≤ 64 bytes."""

T = TypeVar("T")
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


def retry_after_seconds(exc: RetryAfter) -> float:
    """PTB 22 returns int or timedelta depending on PTB_TIMEDELTA, and warns on access."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def is_not_modified(exc: BaseException) -> bool:
    return isinstance(exc, BadRequest) and "message is not modified" in exc.message.lower()


def translate(exc: TelegramError) -> DeliveryError:
    """The `adapters.errors` equivalent of a PTB error (never called for "not modified")."""
    if isinstance(exc, RetryAfter):
        return RateLimited(retry_after_seconds(exc), str(exc))
    text = exc.message.lower()
    if isinstance(exc, BadRequest):
        if "can't parse entities" in text or "can't find end of" in text:
            return FormattingRejected(exc.message)
        if "message is too long" in text or "text is too long" in text:
            return MessageTooLong(exc.message)
        if "message to edit not found" in text or "message to delete not found" in text:
            return MessageGone(exc.message)
    return DeliveryError(f"{type(exc).__name__}: {exc.message}")


async def call(request: Callable[[], Awaitable[T]]) -> T:
    """Run one Bot API request, translating PTB errors (see the module docstring)."""
    try:
        return await request()
    except TelegramError as exc:
        raise translate(exc) from exc


def to_ptb_entities(entities: Sequence[Entity]) -> list[MessageEntity] | None:
    if not entities:
        return None
    return [
        MessageEntity(e.type, e.offset, e.length, url=e.url, language=e.language) for e in entities
    ]


def to_markup(keyboard: Keyboard | None) -> InlineKeyboardMarkup | None:
    if not keyboard:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row] for row in keyboard]
    )


class TelegramTransport:
    """One chat (and topic). Implements `adapters.transport.ChatTransport`, plus buttons and
    documents for approval cards and notices.

    `reply_to` makes the first message sent through this transport a reply to the user's
    message (used in groups, where several conversations interleave); it degrades to a
    plain message if that message was deleted meanwhile."""

    limit_units: int = TELEGRAM_LIMIT_UNITS
    unit: Unit = "utf16"
    renders_markdown: bool = False

    def __init__(
        self,
        bot: Bot,
        chat_id: int | str,
        thread_id: int | None = None,
        reply_to: int | None = None,
        *,
        interval_s: float = EDIT_INTERVAL_S,
    ) -> None:
        self.min_edit_interval_s = interval_s
        self._bot = bot
        self.chat_id = chat_id
        self.thread_id = thread_id
        self._reply_to = reply_to
        self.chat_key = ("telegram", str(chat_id))  # flood control is per chat, topics share it

    # -- ChatTransport -----------------------------------------------------------------

    async def send(self, text: str, entities: list[Entity]) -> str:
        message = await self.send_message(text, entities)
        return str(message.message_id)

    async def edit(self, message_id: str, text: str, entities: list[Entity]) -> None:
        await self.edit_message(message_id, text, entities)

    async def delete(self, message_id: str) -> None:
        await call(lambda: self._bot.delete_message(self.chat_id, int(message_id)))

    async def typing(self) -> None:
        await call(
            lambda: self._bot.send_chat_action(
                self.chat_id, ChatAction.TYPING, message_thread_id=self.thread_id
            )
        )

    # -- with buttons ------------------------------------------------------------------

    async def send_message(
        self, text: str, entities: Sequence[Entity] = (), keyboard: Keyboard | None = None
    ) -> Message:
        reply = (
            ReplyParameters(self._reply_to, allow_sending_without_reply=True)
            if self._reply_to is not None
            else None
        )
        message = await call(
            lambda: self._bot.send_message(
                self.chat_id,
                text,
                entities=to_ptb_entities(entities),
                message_thread_id=self.thread_id,
                reply_parameters=reply,
                reply_markup=to_markup(keyboard),
                link_preview_options=_NO_PREVIEW,
            )
        )
        self._reply_to = None  # only the first message of a reply quotes the user's message
        return message

    async def edit_message(
        self,
        message_id: str,
        text: str,
        entities: Sequence[Entity] = (),
        keyboard: Keyboard | None = None,
    ) -> None:
        """Replace text, entities and buttons (no `keyboard` removes the buttons)."""
        try:
            await self._bot.edit_message_text(
                text,
                chat_id=self.chat_id,
                message_id=int(message_id),
                entities=to_ptb_entities(entities),
                reply_markup=to_markup(keyboard),
                link_preview_options=_NO_PREVIEW,
            )
        except TelegramError as exc:
            if is_not_modified(exc):
                return  # already shows exactly this: success
            raise translate(exc) from exc

    async def send_document(self, data: bytes, filename: str, caption: str) -> Message:
        return await call(
            lambda: self._bot.send_document(
                self.chat_id,
                InputFile(data, filename=filename),
                caption=caption,
                message_thread_id=self.thread_id,
            )
        )
