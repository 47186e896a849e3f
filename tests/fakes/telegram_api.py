"""A strict fake Telegram Bot API server on 127.0.0.1, for wire-level tests with real clients.

Usage::

    with FakeTelegram(token="123:ABC", bot_username="roost_bot") as tg:
        bot = telegram.Bot(tg.token, base_url=tg.base_url, base_file_url=tg.base_file_url)

The server runs aiohttp in its own thread and event loop, so it serves synchronous and
asynchronous tests alike and never depends on the test's loop. All state sits behind one
lock; every accessor returns copies. Errors are answered exactly like the Bot API
(``{"ok": false, "error_code": ..., "description": ...}`` with the real HTTP status).
Test-side misuse (pressing a button that does not exist, replying to an unknown message)
raises ``ValueError`` in the test instead of producing an update.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import threading
import time
import traceback
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.telegram_inbound import InboundMixin
from tests.fakes.telegram_methods import MESSAGE_CHANGING, METHODS
from tests.fakes.telegram_state import (
    JSON,
    ApiError,
    Call,
    DropRule,
    FailureRule,
    QueuedUpdate,
    WebhookDelivery,
)
from tests.fakes.telegram_webhook import WebhookMixin
from tests.fakes.telegram_wire import read_params
from tests.fakes.telegram_world import World

_CANONICAL = {name.lower(): name for name in [*METHODS, "getUpdates"]}
_WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
_POLL_CONFLICT = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)


class _Poller:
    __slots__ = ("preempted",)

    def __init__(self) -> None:
        self.preempted = False


class FakeTelegram(InboundMixin, WebhookMixin):
    """Fake Bot API. Start with ``with``/``async with`` (or ``start()``/``close()``)."""

    def __init__(
        self,
        token: str = "123:ABC",
        *,
        bot_username: str = "roost_bot",
        bot_name: str = "Roost",
        first_update_id: int = 100_000,
        auto_create_chats: bool = False,
        privacy_mode: bool = True,
    ) -> None:
        if not re.fullmatch(r"\d+:[\w-]+", token):
            raise ValueError("token must look like '<bot id>:<secret>'")
        self.token = token
        self._world = World(
            token=token,
            bot_username=bot_username,
            bot_name=bot_name,
            first_update_id=first_update_id,
            auto_create_chats=auto_create_chats,
            privacy_mode=privacy_mode,
        )
        self._cond = threading.Condition(threading.RLock())
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._calls: list[Call] = []
        self._webhook_log: list[WebhookDelivery] = []
        self._rules: list[FailureRule] = []
        self._drops: list[DropRule] = []
        self._flood: FloodModel | None = None
        self._pollers: set[_Poller] = set()
        self._closing = False
        self._port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._hook_queue: asyncio.Queue[tuple[JSON, str | None]] | None = None
        self._poll_event: asyncio.Event | None = None
        self._hook_task: asyncio.Task[None] | None = None
        self._startup_error: BaseException | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeTelegram:
        """Bind a free port on 127.0.0.1 and serve from a daemon thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("FakeTelegram already started")
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="fake-telegram", daemon=True
        )
        self._thread.start()
        if not ready.wait(10) or self._startup_error is not None:
            raise RuntimeError("fake Telegram server failed to start") from self._startup_error
        return self

    def close(self) -> None:
        """Stop serving: pending long polls return [], webhook deliveries are cancelled."""
        if self._loop is None or self._thread is None or self._closing:
            return
        with self._cond:
            self._closing = True
        self._loop.call_soon_threadsafe(self._wake_pollers)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> FakeTelegram:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    @property
    def base_url(self) -> str:
        """Give to PTB as ``base_url``: PTB appends the token, then ``/<method>``."""
        return f"http://127.0.0.1:{self._port}/bot"

    @property
    def base_file_url(self) -> str:
        """Give to PTB as ``base_file_url``: downloads go to ``<this><token>/<file_path>``."""
        return f"http://127.0.0.1:{self._port}/file/bot"

    @property
    def api_url(self) -> str:
        """``<base_url><token>``: append ``/<method>`` for plain HTTP clients."""
        return f"{self.base_url}{self.token}"

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start()
            self._startup_error = exc
            ready.set()
            loop.close()
            return
        self._loop = loop
        ready.set()
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _startup(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        self._hook_queue = asyncio.Queue()
        self._poll_event = asyncio.Event()
        self._hook_task = asyncio.get_running_loop().create_task(self._webhook_worker())

    async def _shutdown(self) -> None:
        if self._hook_task is not None:
            self._hook_task.cancel()
            await asyncio.gather(self._hook_task, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- HTTP ----------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        at = time.monotonic()
        file_match = re.fullmatch(r"/file/bot([^/]+)/(.+)", request.path)
        if file_match:
            return self._download(*file_match.groups())
        match = re.fullmatch(r"/bot([^/]*)/([A-Za-z]+)", request.path)
        if match is None:
            return _answer(ApiError(404, "Not Found").payload(), 404)
        method = _CANONICAL.get(match.group(2).lower(), match.group(2))
        call = Call(method, {}, at, "query")
        try:
            call.params, call.encoding = await read_params(request)
            if match.group(1) != self.token:
                raise ApiError(401, "Unauthorized")
            if method not in _CANONICAL.values():
                raise ApiError(404, "Not Found")
            self._inject(call)
            drop = self._take_drop(call)
            if drop is not None and not drop.apply:
                return await self._withhold(request, call, drop)
            call.result = (
                await self._get_updates(call.params)
                if method == "getUpdates"
                else self._invoke(method, call.params)
            )
            call.ok = True
            if drop is not None:
                return await self._withhold(request, call, drop)
        except ApiError as err:
            call.status, call.description = err.status, err.description
            self._record(call)
            return _answer(err.payload(), err.status)
        except asyncio.CancelledError:
            if not call.dropped:  # a dropped call was recorded as applied
                call.status, call.description = 499, "Client Closed Request"
                self._record(call)
            raise
        except Exception as exc:  # a bug in the fake: answer 500 and make it visible
            traceback.print_exc()
            call.status, call.description = 500, f"Internal Server Error: fake raised {exc!r}"
            self._record(call)
            return _answer(ApiError(500, call.description).payload(), 500)
        self._record(call)
        return _answer({"ok": True, "result": call.result}, 200)

    def _download(self, token: str, path: str) -> web.Response:
        """Only a path getFile issued, within its lifetime (else 404, like Telegram)."""
        with self._cond:
            issued = self._world.file_paths.get(path)
            found = None
            if issued is not None and self._world.file_clock() < issued[1]:
                found = self._world.files.get(issued[0])
            self._world.downloads.append(path)
        if token != self.token:
            return _answer(ApiError(401, "Unauthorized").payload(), 401)
        if found is None:
            return _answer(ApiError(404, "Not Found").payload(), 404)
        return web.Response(
            body=found.data, content_type=found.mime_type or "application/octet-stream"
        )

    def _invoke(self, method: str, params: JSON) -> Any:
        with self._cond:
            result = METHODS[method](self._world, params)
            if method == "setWebhook" and self._world.webhook.url:
                pending, self._world.pending = self._world.pending, []
                for queued in pending:
                    self._to_webhook(queued.update)
            return result

    def _inject(self, call: Call) -> None:
        """Apply fail_next() rules and flood_limit() pacing; raises the injected error."""
        chat = str(call.params.get("chat_id"))
        with self._cond:
            for rule in self._rules:
                if rule.method in (call.method, "*") and rule.chat_id in (None, chat):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
                    call.injected = True
                    raise ApiError(rule.status, rule.description, copy.deepcopy(rule.parameters))
            if self._flood is None or call.method not in MESSAGE_CHANGING:
                return
            wait = self._flood.admit(chat, call.at)
            if wait is not None:
                call.injected = True
                raise ApiError(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})

    def _take_drop(self, call: Call) -> DropRule | None:
        chat = str(call.params.get("chat_id"))
        with self._cond:
            for rule in self._drops:
                if rule.method in (call.method, "*") and rule.chat_id in (None, chat):
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._drops.remove(rule)
                    return rule
        return None

    async def _withhold(self, request: web.Request, call: Call, rule: DropRule) -> web.StreamResponse:
        """The call took effect (unless the rule says not); its answer never reaches the client."""
        call.dropped = True
        if not rule.apply:
            call.status, call.description = 0, "dropped before it took effect"
        self._record(call)
        if rule.how == "stall":  # the client's read timeout fires first; then we hang up
            await asyncio.sleep(_STALL_S)
        transport = request.transport
        if transport is not None:
            transport.abort()  # RST, as a proxy or a flaky link drops a connection
        return _answer({"ok": True, "result": call.result}, 200)  # written to nobody

    async def _get_updates(self, params: JSON) -> list[JSON]:
        """Long poll: answer at once if updates are pending, else wait up to ``timeout`` s."""
        assert self._poll_event is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, float(params.get("timeout") or 0))
        me = _Poller()
        with self._cond:
            if self._world.webhook.url:
                raise ApiError(409, _WEBHOOK_CONFLICT)
            for other in self._pollers:
                other.preempted = True
            self._pollers.add(me)
        self._wake_pollers()
        try:
            while True:
                event = self._poll_event
                with self._cond:
                    if me.preempted:
                        raise ApiError(409, _POLL_CONFLICT)
                    updates = self._world.take_updates(
                        params.get("offset"),
                        int(params.get("limit") or 100),
                        params.get("allowed_updates"),
                    )
                    if updates or self._closing:
                        return updates
                    self._changed()  # a test may wait for "the client is polling now"
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                try:
                    async with asyncio.timeout(remaining):
                        await event.wait()
                except TimeoutError:
                    pass
        finally:
            with self._cond:
                self._pollers.discard(me)

    def _wake_pollers(self) -> None:
        """Runs on the server loop: wakes every waiting long poll to re-check."""
        if self._poll_event is not None:
            self._poll_event.set()
            self._poll_event = asyncio.Event()

    # ---- update delivery (called with the lock held) -------------------------------------
    def _deliver(self, update: JSON, *, forced: bool = False) -> None:
        if self._world.webhook.url:
            self._to_webhook(update)
        else:
            self._world.pending.append(QueuedUpdate(copy.deepcopy(update), forced=forced))
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._wake_pollers)
        self._changed()

    # ---- fault injection -----------------------------------------------------------------
    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int = 2,
        description: str | None = None,
        count: int = 1,
        chat_id: int | str | None = None,
    ) -> None:
        """Fail the next ``count`` calls of ``method`` ("*" = any) [for ``chat_id``] without effect.

        429 answers carry ``parameters.retry_after``; other statuses use ``description``
        (default: the HTTP phrase, or "Bad Request: injected failure" for 400).
        """
        if method != "*" and method not in _CANONICAL.values():
            raise ValueError(f"unknown Bot API method {method!r}")
        params = {"retry_after": retry_after} if status == 429 else None
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else "Bad Request: injected failure"
                if status == 400
                else HTTPStatus(status).phrase
            )
        with self._cond:
            self._rules.append(
                FailureRule(
                    method,
                    status,
                    description,
                    params,
                    count,
                    None if chat_id is None else str(chat_id),
                )
            )

    def flood_limit(
        self,
        min_interval_s_per_chat: float | None,
        *,
        burst: int = 1,
        group_per_minute: int | None = None,
    ) -> None:
        """Answer 429 with retry_after to message-changing calls beyond Telegram's flood
        limits: per chat a bucket of ``burst`` requests refilled one per interval (short
        bursts pass, the sustained rate is one per interval), and in groups (negative chat
        ids) at most ``group_per_minute`` in any 60 s. ``None`` turns the limits off."""
        with self._cond:
            self._flood = (
                None
                if min_interval_s_per_chat is None
                else FloodModel(min_interval_s_per_chat, burst, group_per_minute)
            )

    def drop_response_next(
        self,
        method: str,
        *,
        how: str = "reset",
        count: int = 1,
        chat_id: int | str | None = None,
        apply: bool = True,
    ) -> None:
        """APPLY the next ``count`` calls of ``method`` [for ``chat_id``], then withhold the
        answer: ``how="reset"`` closes the connection at once (the client sees a reset or
        "server disconnected"), ``"stall"`` answers nothing for a minute (the client's read
        timeout fires). The chat shows the effect; the client cannot know it. With
        ``apply=False`` the request is lost before it takes effect — to the client, the
        same failure."""
        if method != "*" and method not in _CANONICAL.values():
            raise ValueError(f"unknown Bot API method {method!r}")
        if how not in ("reset", "stall"):
            raise ValueError("how must be 'reset' or 'stall'")
        with self._cond:
            self._drops.append(
                DropRule(method, how, count, None if chat_id is None else str(chat_id), apply)
            )

    def set_chat_admin(self, chat_id: int, user_id: int, status: str | None = "administrator") -> None:
        """Make ``user_id`` the "creator" or an "administrator" of the group ``chat_id`` as
        getChatMember reports it; ``None`` demotes them to a plain member."""
        if status not in ("creator", "administrator", None):
            raise ValueError("status must be 'creator', 'administrator' or None")
        with self._cond:
            admins = self._world.admins.setdefault(chat_id, {})
            if status is None:
                admins.pop(user_id, None)
            else:
                admins[user_id] = status

    def set_privacy_mode(self, enabled: bool) -> None:
        """BotFather /setprivacy: with privacy mode on (Telegram's default) a group message
        reaches the bot only if it mentions the bot, replies to it, or is a command."""
        with self._cond:
            self._world.privacy_mode = enabled


_STALL_S = 60.0


class FloodModel:
    """Telegram's flood limits as the fake enforces them (all times monotonic seconds)."""

    def __init__(self, interval: float, burst: int, group_per_minute: int | None) -> None:
        self.interval, self.burst, self.group_per_minute = interval, max(1, burst), group_per_minute
        self._tokens: dict[str, tuple[float, float]] = {}  # chat → (tokens, as of)
        self._recent: dict[str, list[float]] = {}  # group chat → accepted call times

    def admit(self, chat: str, at: float) -> int | None:
        """None if a call at ``at`` is within the limits (and count it), else retry_after."""
        tokens, since = self._tokens.get(chat, (float(self.burst), at))
        tokens = min(float(self.burst), tokens + (at - since) / self.interval) if self.interval else self.burst
        if tokens < 1.0:
            return max(1, math.ceil((1.0 - tokens) * self.interval))
        recent = self._recent.setdefault(chat, [])
        if self.group_per_minute is not None and chat.startswith("-"):
            recent[:] = [t for t in recent if at - t < 60.0]
            if len(recent) >= self.group_per_minute:
                return max(1, math.ceil(60.0 - (at - recent[0])))
            recent.append(at)
        self._tokens[chat] = (tokens - 1.0, at)
        return None


def _answer(body: JSON, status: int) -> web.Response:
    text = json.dumps(body, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate (as Telegram may send): escape it as \uXXXX
        text = json.dumps(body)
    return web.Response(status=status, text=text, content_type="application/json")
