"""Recording, waiting and inspection for the fake Bot API (mixed into FakeTelegram).

Waiting is condition-based: every state change calls ``_changed()``, which notifies a
``threading.Condition`` (for ``wait_for``) and sets an ``asyncio.Event`` on each awaiting
loop (for ``await_for``). Predicates run under the fake's lock; accessors return copies.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tests.fakes.telegram_state import (
    JSON,
    Call,
    CallbackQueryState,
    StoredMessage,
    WebhookDelivery,
)
from tests.fakes.telegram_world import Webhook, World

T = TypeVar("T")


class InspectMixin:
    """Provides FakeTelegram's observation API over state the server thread mutates."""

    _cond: threading.Condition
    _world: World
    _calls: list[Call]
    _webhook_log: list[WebhookDelivery]
    _async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]
    _pollers: set[Any]

    # ---- recording and waiting -----------------------------------------------------------
    def _record(self, call: Call) -> None:
        call.finished_at = time.monotonic()
        with self._cond:
            self._calls.append(call)
            self._changed()

    def _changed(self) -> None:
        """Called with the lock held after any state change: wake sync and async waiters."""
        self._cond.notify_all()
        for loop, event in self._async_waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed; its waiter is gone
                loop.call_soon_threadsafe(event.set)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        """Block until ``predicate()`` (evaluated under the fake's lock) is truthy; return it.

        Raises TimeoutError listing recent calls. Refuses to run inside an event loop
        thread, where blocking would starve the client under test: use ``await_for`` there.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "wait_for() would block this event loop; use 'await tg.await_for(...)'"
            )
        with self._cond:
            value = self._cond.wait_for(predicate, timeout)
            if value:
                return value
            raise TimeoutError(self._timeout_report(timeout))

    async def await_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        """Async ``wait_for``: waits on an event the server sets on every change; never blocks the loop."""
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        deadline = loop.time() + timeout
        with self._cond:
            self._async_waiters.append(waiter)
        try:
            while True:
                waiter[1].clear()
                with self._cond:
                    value = predicate()
                if value:
                    return value
                if loop.time() >= deadline:
                    raise TimeoutError(self._timeout_report(timeout))
                try:
                    async with asyncio.timeout_at(deadline):
                        await waiter[1].wait()
                except TimeoutError:
                    pass
        finally:
            with self._cond:
                self._async_waiters.remove(waiter)

    def _timeout_report(self, timeout: float) -> str:
        recent = [
            f"{c.method} -> {'ok' if c.ok else f'{c.status} {c.description}'}"
            for c in self._calls[-12:]
        ]
        return f"condition not met within {timeout} s; last calls: {recent}"

    # ---- inspection ----------------------------------------------------------------------
    @property
    def calls(self) -> list[Call]:
        """Every answered request in completion order (copies)."""
        with self._cond:
            return copy.deepcopy(self._calls)

    def calls_of(self, method: str) -> list[Call]:
        with self._cond:
            return [copy.deepcopy(c) for c in self._calls if c.method == method]

    def bot_messages(self, chat_id: int, thread_id: int | None = None) -> list[StoredMessage]:
        """The bot's messages still visible in the chat, oldest first (``thread_id`` None = all)."""
        return [
            m
            for m in self.messages(chat_id)
            if m.from_bot and not m.deleted and (thread_id is None or m.thread_id == thread_id)
        ]

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """All messages of the chat, both sides, including deleted ones (copies)."""
        with self._cond:
            chat = self._world.chats.get(chat_id)
            return (
                copy.deepcopy(sorted(chat.messages.values(), key=lambda m: m.message_id))
                if chat
                else []
            )

    def message(self, chat_id: int, message_id: int) -> StoredMessage:
        with self._cond:
            return copy.deepcopy(self._world.chats[chat_id].messages[message_id])

    def update_id_of_query(self, query_id: str) -> int:
        """The update_id that carried callback query ``query_id`` (to ``redeliver`` it)."""
        with self._cond:
            for uid, update in self._world.delivered.items():
                if (update.get("callback_query") or {}).get("id") == query_id:
                    return uid
        raise ValueError(f"unknown callback query {query_id}")

    def callback_query(self, query_id: str) -> CallbackQueryState:
        with self._cond:
            return copy.deepcopy(self._world.queries[query_id])

    def commands(self, scope: JSON | None = None, language_code: str = "") -> list[JSON]:
        with self._cond:
            key = (json.dumps(scope or {"type": "default"}, sort_keys=True), language_code)
            return copy.deepcopy(self._world.commands.get(key, []))

    @property
    def webhook(self) -> Webhook:
        with self._cond:
            return copy.deepcopy(self._world.webhook)

    @property
    def webhook_responses(self) -> list[WebhookDelivery]:
        with self._cond:
            return list(self._webhook_log)

    @property
    def pending_updates(self) -> list[JSON]:
        with self._cond:
            return [copy.deepcopy(q.update) for q in self._world.pending]

    @property
    def is_polling(self) -> bool:
        """True while a getUpdates long poll is waiting on the server."""
        with self._cond:
            return bool(self._pollers)
