"""Taken updates → their processing: in arrival order within a chat, concurrently across
chats, at most `max_concurrent` at once.

Contract: `submit` never blocks and never raises; each chat has at most one worker task,
which exits when its queue is empty; an exception while processing one update is logged
and does not affect the next. `aclose` stops intake, lets work in progress finish for up
to `grace_s`, then cancels the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

from telegram import Update

from adapters.telegram.updates import describe

log = logging.getLogger(__name__)

Work = Callable[[], Awaitable[object]]
"""Processes one update (a stored message's routing, a button press)."""


def chat_key(update: Update) -> Hashable:
    chat = update.effective_chat
    return chat.id if chat is not None else ("no-chat", update.update_id)


class ChatDispatcher:
    """See the module docstring."""

    def __init__(self, *, max_concurrent: int = 64) -> None:
        self._slots = asyncio.Semaphore(max_concurrent)
        self._queues: dict[Hashable, deque[tuple[Update, Work]]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._closed = False

    def submit(self, update: Update, work: Work) -> None:
        if self._closed:
            log.info("telegram.update_after_close %s", describe(update))
            return
        key = chat_key(update)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            worker = asyncio.get_running_loop().create_task(self._work(key, queue), name=f"tg-chat-{key}")
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)
        queue.append((update, work))

    async def _work(self, key: Hashable, queue: deque[tuple[Update, Work]]) -> None:
        try:
            while queue:
                update, work = queue.popleft()
                async with self._slots:
                    try:
                        await work()
                    except Exception:  # task boundary: one bad update must not stop the chat
                        log.exception("telegram.update_failed %s", describe(update))
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def aclose(self, grace_s: float = 5.0) -> None:
        self._closed = True
        workers = set(self._workers)
        if not workers:
            return
        _, still_running = await asyncio.wait(workers, timeout=grace_s)
        for worker in still_running:
            worker.cancel()
        await asyncio.gather(*still_running, return_exceptions=True)
