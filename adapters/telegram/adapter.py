"""The Telegram adapter: python-telegram-bot's `ExtBot` + `Updater` (polling or webhook),
turned into `Inbound` values for the `InboundHandler` and rendered replies back.

Lifecycle: `start(handler)` calls getMe (the bot's username decides what counts as a
mention), registers the commands with setMyCommands (in the background: it must not delay
the first poll), then long-polls — or, in webhook mode, registers `webhook_url` with
setWebhook and serves its path on `webhook_listen`, checking the secret on every request
(a wrong or missing secret gets 403 and nothing is processed; webhook mode refuses to
start without a secret). An update is confirmed to Telegram (the next getUpdates offset, the
webhook's 200) only after its message is stored in the inbox (`intake.py`). If start fails,
everything started so far is closed. `aclose` stops intake, lets updates in progress finish
briefly, drops queued sends, and closes the HTTP clients; it is idempotent.

Outgoing traffic: one `Outbox` per adapter paces every chat (≥ 1.0 s between requests in a
private chat as Telegram sees them, 3 s in groups: 20 a minute) and pauses on
`retry_after`; PTB's `AIORateLimiter` (no retries) keeps the global 30 requests/s, chat
actions excepted (`limiter.py`: the typing indicator never takes a message's slot). Long
polling has its own HTTP pool so it never starves sends.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Coroutine, Mapping, Sequence
from functools import partial
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from telegram import BotCommand, Update
from telegram.error import TelegramError
from telegram.ext import ExtBot, Updater
from telegram.request import BaseRequest, HTTPXRequest

from adapters.base import Button, Delivery, InboundHandler
from adapters.lifecycle import StartsOnce
from adapters.errors import DeliveryError, MessageGone, Superseded
from adapters.outbox import Clock, Outbox, Priority, Sleep
from adapters.pacing import through_outbox
from adapters.render.split import split_entities
from adapters.render.utf16 import index_for_units, utf16_len
from adapters.telegram.approval_cards import ApprovalCards, parse_card_ref, record_payload
from adapters.telegram.callback_data import CallbackCodec
from adapters.telegram.callbacks import CallbackHandler
from adapters.telegram.dispatch import ChatDispatcher
from adapters.telegram.intake import Intake
from adapters.telegram.limiter import RateLimiter
from adapters.telegram.once import OnceSends
from adapters.telegram.polling import Polling
from adapters.telegram.reply import ReplyContext, TelegramReply, transport_for
from adapters.telegram.transport import EDIT_INTERVAL_S, GROUP_INTERVAL_S, TELEGRAM_LIMIT_UNITS, Keyboard, call
from adapters.telegram.updates import BotIdentity, describe, to_inbound
from agent_core.inbound import ReplyTarget
from agent_core.ports import ApprovalRecord

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.telegram.org/bot"
ALLOWED_UPDATES = ("message", "callback_query")
INTERRUPTED_NOTE = "\n\n… (interrupted: Roost restarted)"
ADMIN_CACHE_S = 60.0
"""How long getChatMember's answer stands for one (chat, user): a demoted admin loses
/new within a minute, and a burst of commands costs one request."""
ADMIN_STATUSES = frozenset({"creator", "administrator"})
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
Mode = Literal["polling", "webhook"]


class _RetryAfterHandledHere(logging.Filter):
    """AIORateLimiter (with max_retries=0, as we use it) logs every RetryAfter at ERROR with
    a traceback before re-raising it; our outbox handles exactly that error, so the record
    is noise. Only that record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Rate limit hit after maximum of 0 retries")


_PTB_RATE_LIMITER_LOG = logging.getLogger("telegram.ext.AIORateLimiter")
if not any(isinstance(f, _RetryAfterHandledHere) for f in _PTB_RATE_LIMITER_LOG.filters):
    _PTB_RATE_LIMITER_LOG.addFilter(_RetryAfterHandledHere())


class TelegramConfigError(ValueError):
    """The adapter's settings cannot work (e.g. webhook mode without a webhook URL)."""


def file_url_for(base_url: str) -> str | None:
    """Bot API servers serve files at `<root>/file/bot`; None lets PTB use its default."""
    return base_url[: -len("/bot")] + "/file/bot" if base_url.endswith("/bot") else None


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise TelegramConfigError(f"webhook listen address {listen!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


class TelegramAdapter(StartsOnce):
    """Implements `adapters.base.Adapter` for Telegram; see the module docstring."""

    platform = "telegram"

    def __init__(
        self,
        token: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        base_file_url: str | None = None,
        mode: Mode = "polling",
        webhook_url: str | None = None,
        webhook_listen: str = "0.0.0.0:8443",
        webhook_secret: str | None = None,
        commands: Mapping[str, str] | None = None,
        bot_username: str | None = None,
        request: BaseRequest | None = None,
        get_updates_request: BaseRequest | None = None,
        rate_limit: bool = True,
        poll_timeout_s: float = 25.0,
        max_concurrent_updates: int = 64,
        private_interval_s: float = EDIT_INTERVAL_S,
        group_interval_s: float = GROUP_INTERVAL_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if mode == "webhook":
            if not webhook_url:
                raise TelegramConfigError("webhook mode needs ROOST_TELEGRAM__WEBHOOK_URL")
            # Without the secret anyone who finds the URL could post updates "from" the owner,
            # button presses on approval cards included.
            if not webhook_secret or not _SECRET.fullmatch(webhook_secret):
                raise TelegramConfigError(
                    "webhook mode needs ROOST_TELEGRAM__WEBHOOK_SECRET: 1-256 characters of "
                    "A-Z, a-z, 0-9, _ and - (Telegram sends it with every update)"
                )
            self._listen = parse_listen(webhook_listen)
        self._token = token
        self._base_url = base_url
        self._base_file_url = base_file_url or file_url_for(base_url)
        self._mode = mode
        self._webhook_url = webhook_url
        self._webhook_secret = webhook_secret
        self._commands = dict(commands or {})
        self._username_override = bot_username
        self._request = request
        self._get_updates_request = get_updates_request
        self._rate_limit = rate_limit
        self._poll_timeout_s = poll_timeout_s
        self._max_concurrent = max_concurrent_updates
        self._intervals = (private_interval_s, group_interval_s)
        self._clock, self._sleep = clock, sleep
        self._state: Literal["new", "running", "closed"] = "new"
        self._bot: ExtBot[Any] | None = None
        self._updater: Updater | None = None
        self._polling: Polling | None = None
        self._outbox: Outbox | None = None
        self._dispatcher: ChatDispatcher | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ctx: ReplyContext | None = None
        self._callbacks: CallbackHandler | None = None
        self.approver_names: dict[str, str] = {}
        """`adapters.base.NamesApprovers`: the cards' names, by identity."""
        self._codec = CallbackCodec()
        self._handler: InboundHandler | None = None
        self._me: BotIdentity | None = None
        self._admins: dict[tuple[str, str], tuple[float, bool]] = {}  # -> (checked at, admin)
        self._once = OnceSends()

    @property
    def bot_username(self) -> str | None:
        """The bot's @username (from getMe), once started."""
        return self._me.username if self._me else None

    # -- lifecycle -------------------------------------------------------------------

    async def _start(self, handler: InboundHandler) -> None:
        self._handler = handler
        # One TLS context (CA store) for both pools instead of one each: ~0.8 MB less RSS.
        tls = {"verify": httpx.create_ssl_context()}
        bot: ExtBot[Any] = ExtBot(
            self._token,
            base_url=self._base_url,
            base_file_url=self._base_file_url,
            request=self._request or HTTPXRequest(connection_pool_size=128, pool_timeout=30.0, httpx_kwargs=tls),
            get_updates_request=self._get_updates_request or HTTPXRequest(httpx_kwargs=tls),
            rate_limiter=RateLimiter() if self._rate_limit else None,
        )
        self._bot = bot
        await bot.initialize()  # getMe
        me = bot.bot
        self._me = BotIdentity(me.id, self._username_override or me.username or "")
        self._outbox = Outbox(clock=self._clock, sleep=self._sleep)
        await self._outbox.start()
        cards = ApprovalCards(self._outbox, self._codec, on_card=handler.note_approval_card)
        cards.names = self.approver_names
        self._ctx = ReplyContext(
            bot, self._outbox, cards, handler, self._clock, self._sleep, *self._intervals
        )
        self._callbacks = CallbackHandler(self._ctx, self._codec)
        self._dispatcher = ChatDispatcher(max_concurrent=self._max_concurrent)
        # PTB confirms an update when `put` returns: only once it is stored (see intake.py).
        self._updater = Updater(bot, Intake(self._take))
        await self._updater.initialize()
        if self._commands:
            self._spawn(self._register_commands())
        if self._mode == "polling":  # with replicas, by one of them at a time (polling.py)
            updater = self._updater
            self._polling = Polling(updater, handler.leads, partial(
                updater.start_polling, timeout=self._poll_timeout_s, allowed_updates=list(ALLOWED_UPDATES),
                error_callback=self._polling_error,
            ))  # fmt: skip
            await self._polling.start()
        else:
            host, port = self._listen
            await self._updater.start_webhook(
                listen=host,
                port=port,
                url_path=urlsplit(self._webhook_url or "").path,
                webhook_url=self._webhook_url,
                secret_token=self._webhook_secret,
                allowed_updates=list(ALLOWED_UPDATES),
            )
        log.info("telegram.started mode=%s bot=@%s", self._mode, self._me.username)

    async def aclose(self) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        updater = self._updater
        if self._polling is not None:
            await _quietly("polling.stop", self._polling.hand_over())
        if updater is not None and updater.running:
            await _quietly("updater.stop", updater.stop())
        if self._dispatcher is not None:
            await self._dispatcher.aclose()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._outbox is not None:
            await self._outbox.aclose()
        if updater is not None:
            await _quietly("updater.shutdown", updater.shutdown())  # shuts the bot down too
        elif self._bot is not None:
            await _quietly("bot.shutdown", self._bot.shutdown())
        log.info("telegram.closed")

    async def __aenter__(self) -> TelegramAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def hand_over(self) -> None:
        """Shutting down with replicas: stop polling and let another replica poll now
        (sends still work while this one finishes)."""
        if self._polling is not None and self._state == "running":
            await self._polling.hand_over()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _register_commands(self) -> None:
        assert self._bot is not None
        commands = [BotCommand(name, text[:256]) for name, text in self._commands.items()]
        try:
            await self._bot.set_my_commands(commands)
        except TelegramError as exc:  # the bot works without the command menu
            log.warning("telegram.set_commands_failed: %s", exc)

    def _polling_error(self, exc: TelegramError) -> None:
        log.warning("telegram.polling_error %s: %s", type(exc).__name__, exc)

    # -- inbound ---------------------------------------------------------------------

    async def _take(self, update: object) -> None:
        """Called by PTB for each update, which it confirms when this returns: a message is
        stored first (`InboundHandler.take`), then routed by the chat's worker. A button
        press has no inbox row and is handed on at once (a press lost to a crash leaves
        its button in place, to be pressed again)."""
        assert self._handler is not None and self._me is not None and self._callbacks is not None
        assert self._dispatcher is not None
        if not isinstance(update, Update):
            log.warning("telegram.unexpected_update type=%s", type(update).__name__)
            return
        if update.callback_query is not None:
            self._dispatcher.submit(update, partial(self._callbacks.handle, update.callback_query))
            return
        inbound = to_inbound(update, self._me)
        if inbound is None:
            log.info("telegram.update_ignored %s", describe(update))
            return
        taken = await self._handler.take(inbound)
        if taken is not None:  # None: taken before (a redelivery), answered once already
            self._dispatcher.submit(update, partial(self._handler.handle, taken))

    async def fetch_attachment(self, attachment: Any, max_bytes: int) -> bytes:
        """`adapters.media.MediaFetcher` (see adapters.telegram.media)."""
        from adapters.telegram.media import fetch

        if self._bot is None:
            raise RuntimeError("TelegramAdapter is not running")
        return await fetch(self._bot, attachment, max_bytes)

    # -- outbound --------------------------------------------------------------------

    async def send_file(
        self, target: ReplyTarget, data: bytes, filename: str, *, caption: str = "", send_as: str = "document"
    ) -> str:
        """`adapters.media.FileSender`: sendPhoto / sendVoice / sendDocument, paced like text."""
        ctx = self._running()
        transport = transport_for(ctx, target, quote=False)

        async def send() -> str:
            return str((await transport.send_media(send_as, data, filename, caption[:1024])).message_id)

        return await through_outbox(
            ctx.outbox, transport.chat_key, send, interval=transport.min_edit_interval_s, pace=transport.pace,
        )

    def _running(self) -> ReplyContext:
        if self._state != "running" or self._ctx is None:
            raise RuntimeError("TelegramAdapter is not running")
        return self._ctx

    def open_reply(self, target: ReplyTarget) -> TelegramReply:
        return TelegramReply(self._running(), target)

    async def send_text(self, target: ReplyTarget, text: str, *, buttons: Sequence[Button] = ()) -> str:
        """Plain text (Telegram links commands and URLs itself), split at 4096 UTF-16 units;
        buttons go on the last message. Returns the last message's id."""
        ctx = self._running()
        chunks = split_entities(text, (), TELEGRAM_LIMIT_UNITS, "utf16")
        if not chunks:
            raise DeliveryError("refusing to send an empty message")
        keyboard: Keyboard = [[(b.label, self._codec.encode(b.action))] for b in buttons]
        transport = transport_for(ctx, target, quote=True)
        message_id = ""
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1

            async def send(text: str = chunk.text, kb: Keyboard | None = keyboard if last else None) -> str:
                return str((await transport.send_message(text, (), kb)).message_id)

            message_id = await through_outbox(
                ctx.outbox, transport.chat_key, send, interval=transport.min_edit_interval_s, pace=transport.pace,
            )
        return message_id

    async def send_once(
        self,
        target: ReplyTarget,
        text: str,
        key: str,
        *,
        buttons: Sequence[Button] = (),
        uncertain_for: float | None = None,
    ) -> str:
        """`adapters.base.OnceSender`: like `send_text`, for a send attempted again until it
        arrives; a lost answer is looked for, never sent blindly (`adapters.telegram.once`)."""
        ctx = self._running()
        parts = split_entities(text, (), TELEGRAM_LIMIT_UNITS, "utf16")
        if not parts:
            raise DeliveryError("refusing to send an empty message")
        keyboard: Keyboard = [[(b.label, self._codec.encode(b.action))] for b in buttons]
        chunks = [(p.text, keyboard if n == len(parts) - 1 else None) for n, p in enumerate(parts)]
        transport = transport_for(ctx, target, quote=False)
        return await self._once.send(ctx.outbox, transport, chunks, key, uncertain=uncertain_for is not None)

    async def send_notice(self, target: ReplyTarget, text: str) -> str | None:
        """A short notice ("⏳ Got it") that never delays another message of the chat:
        dropped unsent (None) if one waits when its turn comes (`adapters.base.SendsNotices`)."""
        ctx = self._running()
        transport = transport_for(ctx, target, quote=True)
        chunk = text[: index_for_units(text, TELEGRAM_LIMIT_UNITS)]
        try:
            message = await through_outbox(
                ctx.outbox,
                transport.chat_key,
                lambda: transport.send_message(chunk),
                interval=transport.min_edit_interval_s,
                pace=transport.pace,
                best_effort=True,
            )
        except Superseded:
            log.info("telegram.notice_superseded chat=%s", target.chat_id)
            return None
        return str(message.message_id)

    async def close_expired_card(self, record: ApprovalRecord) -> None:
        """Edit a card left live by a previous process to its final state, without buttons."""
        ctx = self._running()
        where = parse_card_ref(record.chat_ref or "")
        if where is None:
            return
        chat_id, thread, message_id = where
        transport = ctx.transport(chat_id, thread)
        payload = record_payload(record, None)
        try:
            await through_outbox(
                ctx.outbox,
                transport.chat_key,
                lambda: transport.edit_message(message_id, payload.text, payload.entities, None),
                interval=transport.min_edit_interval_s,
                pace=transport.pace,
                priority=Priority.EDIT,
            )
        except MessageGone:
            log.info("telegram.expired_card_gone chat=%s message=%s", chat_id, message_id)

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        """Whether getChatMember says `user_id` is the creator or an administrator of
        `chat_id`; answers are cached ADMIN_CACHE_S per (chat, user). A failed request raises
        `DeliveryError` and is not cached: the caller refuses, and the next command asks again."""
        ctx = self._running()
        key = (chat_id, user_id)
        cached = self._admins.get(key)
        now = self._clock()
        if cached is not None and now - cached[0] < ADMIN_CACHE_S:
            return cached[1]
        member = await call(lambda: ctx.bot.get_chat_member(int(chat_id), int(user_id)))
        admin = member.status in ADMIN_STATUSES
        if len(self._admins) > 4096:  # many groups, many members: keep only fresh answers
            self._admins = {k: v for k, v in self._admins.items() if now - v[0] < ADMIN_CACHE_S}
        self._admins[key] = (now, admin)
        return admin

    async def mark_interrupted(self, delivery: Delivery) -> None:
        """Append a note to the cut-off message in place; a deleted message needs nothing."""
        ctx = self._running()
        if delivery.message_id is None:
            return
        thread = int(delivery.thread_id) if delivery.thread_id else None
        transport = ctx.transport(delivery.chat_id, thread)
        text = delivery.text.rstrip()
        text = text[: index_for_units(text, TELEGRAM_LIMIT_UNITS - utf16_len(INTERRUPTED_NOTE))]
        note = (text + INTERRUPTED_NOTE).strip()
        message_id = delivery.message_id
        try:
            await through_outbox(
                ctx.outbox,
                transport.chat_key,
                lambda: transport.edit_message(message_id, note),
                interval=transport.min_edit_interval_s,
                pace=transport.pace,
                priority=Priority.EDIT,
            )
        except MessageGone:
            log.info("telegram.interrupted_message_gone chat=%s message=%s", delivery.chat_id, message_id)


async def _quietly(what: str, aw: Coroutine[Any, Any, Any]) -> None:
    try:
        await aw
    except Exception:  # closing must go on: later steps still release their resources
        log.exception("telegram.close_step_failed step=%s", what)
