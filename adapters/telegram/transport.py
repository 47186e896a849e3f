"""`ChatTransport` over python-telegram-bot's `Bot`: one chat (and forum topic), PTB errors
translated into the `adapters.errors` tree at this boundary.

Translation (descriptions matched case-insensitively: PTB strips "Bad Request: " and
re-capitalizes what follows):

    RetryAfter                                   → RateLimited(retry_after seconds)
    BadRequest "message is not modified"         → success (the message already shows it)
    BadRequest "can't parse entities"            → FormattingRejected
    BadRequest "message is too long"             → MessageTooLong
    BadRequest "message to edit/delete not found"→ MessageGone
    NetworkError / TimedOut after connecting     → DeliveryUnknown (written, answer lost)
    any other TelegramError                      → DeliveryError (connect errors: not sent)

No pacing and no retries here: the adapter's `Outbox` owns both.
"""

from __future__ import annotations

import datetime as dtm
import logging
import warnings
from collections import deque
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
import httpx
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from adapters.outbox import Pace
from adapters.errors import (
    DeliveryError,
    DeliveryUnknown,
    FormattingRejected,
    MessageGone,
    MessageTooLong,
    RateLimited,
)
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
BURST = 3
"""Requests a chat idle for a while may make at once (Telegram tolerates short bursts; its
limits are on the sustained rate): a new reply's first message does not wait out the pace
of the previous one. Edits of one message stay `interval` apart."""
GROUP_PER_MINUTE = 20
"""Telegram's cap per group, held over any 60 s even with bursts."""

Keyboard = Sequence[Sequence[tuple[str, str]]]
"""Rows of (label, callback_data) inline buttons; callback_data already ≤ 64 bytes."""

T = TypeVar("T")
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
PROBE_SPAN = 3
"""Message ids a lost-send probe tries after the last id known before the lost send."""

log = logging.getLogger(__name__)


class SentLedger:
    """Ids of the recent messages this process sent, per chat (shared by an adapter's
    transports). A lost-send probe never touches them: it may only edit a message nobody
    here knows, which can only be a send whose answer was lost."""

    def __init__(self, per_chat: int = 1024) -> None:
        self._per_chat = per_chat
        self._ids: dict[str, deque[int]] = {}

    def add(self, chat: object, message_id: int) -> None:
        self._ids.setdefault(str(chat), deque(maxlen=self._per_chat)).append(message_id)

    def knows(self, chat: object, message_id: int) -> bool:
        return message_id in self._ids.get(str(chat), ())

    def last(self, chat: object) -> int | None:
        ids = self._ids.get(str(chat))
        return max(ids) if ids else None


def retry_after_seconds(exc: RetryAfter) -> float:
    """PTB 22 returns int or timedelta depending on PTB_TIMEDELTA, and warns on access."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def is_not_modified(exc: BaseException) -> bool:
    return isinstance(exc, BadRequest) and "message is not modified" in exc.message.lower()


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
"""httpx errors raised before a request's first byte left: the Bot API never saw it."""


def was_written(exc: NetworkError) -> bool:
    """Whether a failed request may have reached Telegram. PTB wraps every httpx error in
    `NetworkError` (`TimedOut` for timeouts) with the httpx error as `__cause__`; only the
    connect phase proves nothing was sent. A 5xx from a proxy is unknown too."""
    return not isinstance(exc.__cause__, _NOT_SENT)


def translate(exc: TelegramError) -> DeliveryError:
    """The `adapters.errors` equivalent of a PTB error (never called for "not modified")."""
    if isinstance(exc, RetryAfter):
        return RateLimited(retry_after_seconds(exc), str(exc))
    if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
        if was_written(exc):
            return DeliveryUnknown(f"{type(exc).__name__}: {exc.message}")
        return DeliveryError(f"not sent: {type(exc).__name__}: {exc.message}")
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
    plain message if that message was deleted meanwhile.

    Lost answers (`DeliveryUnknown` from `send`): `find_sent` looks for the message after
    `floor_id` (the user's message this reply answers) and the last id in `ledger`, by
    editing each unknown candidate to the very content that was sent — Telegram answers
    "message is not modified" only for the lost message itself, "can't be edited" for a
    user's message, "not found" for an id with no message. Bots get no update for their
    own messages and the Bot API has no idempotency key: this is the only way to know.
    Limits: ids in private chats come from the user's own sequence, so activity of the user
    elsewhere leaves gaps ("not found") — a lost message beyond `PROBE_SPAN` such gaps would
    be missed and sent again; a probe that edits a message nobody here knows can only hit
    another lost send of this process (one bot, one process)."""

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
        burst: int = 1,
        per_minute: int | None = None,
        ledger: SentLedger | None = None,
        floor_id: int | None = None,
    ) -> None:
        self.min_edit_interval_s = interval_s
        self.burst = burst
        """Requests the chat may make at once before `interval_s` pacing applies."""
        self.per_minute = per_minute
        """Cap on requests in any 60 s (groups: Telegram allows 20 a minute)."""
        self._bot = bot
        self.chat_id = chat_id
        self.thread_id = thread_id
        self._reply_to = reply_to
        self._ledger = ledger if ledger is not None else SentLedger()
        self._floor_id = floor_id
        self._probe_from: int | None = None
        self.chat_key = ("telegram", str(chat_id))  # flood control is per chat, topics share it

    @property
    def pace(self) -> Pace:
        return Pace(self.min_edit_interval_s, self.burst, self.per_minute)

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
        known = [i for i in (self._floor_id, self._ledger.last(self.chat_id)) if i is not None]
        try:
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
        except DeliveryUnknown:
            # The lost message, if it exists, has an id above every id known before it.
            self._probe_from = max(known) if known else None
            raise
        self._ledger.add(self.chat_id, message.message_id)
        self._reply_to = None  # only the first message of a reply quotes the user's message
        return message

    async def find_sent(
        self, text: str, entities: Sequence[Entity] = (), keyboard: Keyboard | None = None
    ) -> str | None:
        """After `send` raised `DeliveryUnknown` for exactly this content (and buttons): the
        message's id if it exists, None if it provably does not. Raises `DeliveryUnknown`
        when it cannot tell (no id known before the lost send), `DeliveryError` for a probe
        to retry."""
        if self._probe_from is None:
            raise DeliveryUnknown("no message id known before the lost send: cannot look for it")
        candidate, tried, past_the_end = self._probe_from, 0, False
        while tried < PROBE_SPAN:
            candidate += 1
            if self._ledger.knows(self.chat_id, candidate):
                continue  # ours and accounted for: never edited by a probe
            tried += 1
            try:
                await self._bot.edit_message_text(
                    text,
                    chat_id=self.chat_id,
                    message_id=candidate,
                    entities=to_ptb_entities(entities),
                    reply_markup=to_markup(keyboard),
                    link_preview_options=_NO_PREVIEW,
                )
            except TelegramError as exc:
                if is_not_modified(exc):
                    return self._adopt(candidate)  # it shows exactly what we sent: the lost one
                reason = exc.message.lower() if isinstance(exc, BadRequest) else ""
                if "not found" in reason or "can't be edited" in reason or "no text" in reason:
                    past_the_end = "not found" in reason
                    continue  # no message there, a user's, or not a text message
                error = translate(exc)
                if isinstance(error, DeliveryUnknown):  # the probe's own answer was lost
                    raise DeliveryError(f"probe answer lost: {error}") from exc
                raise error from exc
            # A bot message nobody here knew, now showing our content: a lost send of ours.
            log.warning("telegram.probe_edited_unknown_message chat=%s message=%d", self.chat_id, candidate)
            return self._adopt(candidate)
        if not past_the_end:  # every candidate was someone's message: ours may lie beyond
            raise DeliveryUnknown(f"no lost message among the {PROBE_SPAN} ids probed, and more follow")
        self._probe_from = None
        return None  # the ids ran out before ours: it was never posted

    def _adopt(self, message_id: int) -> str:
        self._ledger.add(self.chat_id, message_id)
        self._probe_from = None
        self._reply_to = None
        return str(message_id)

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

    async def send_media(self, kind: str, data: bytes, filename: str, caption: str) -> Message:
        """sendPhoto or sendVoice (`kind` "photo"/"voice"); sendDocument otherwise."""
        if kind not in ("photo", "voice"):
            return await self.send_document(data, filename, caption)
        method = self._bot.send_photo if kind == "photo" else self._bot.send_voice
        message = await call(
            lambda: method(self.chat_id, InputFile(data, filename=filename), caption=caption or None,
                           message_thread_id=self.thread_id)
        )
        self._ledger.add(self.chat_id, message.message_id)
        return message

    async def send_document(self, data: bytes, filename: str, caption: str) -> Message:
        message = await call(
            lambda: self._bot.send_document(
                self.chat_id,
                InputFile(data, filename=filename),
                caption=caption,
                message_thread_id=self.thread_id,
            )
        )
        self._ledger.add(self.chat_id, message.message_id)
        return message
