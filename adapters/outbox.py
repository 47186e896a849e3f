"""One outbox per platform adapter: keyed, coalescing, paced per chat, paused on 429.

Callers submit *actions* under a key (e.g. one per message). An action reads the latest
state when it runs, so a key pending while newer text arrives still sends only the newest
text: intermediate states are skipped for free. Rules:

- one pending op per key; resubmitting keeps the op's place in line (fairness); a key
  belongs to one chat;
- up to `workers` requests in flight, but at most one per chat (so per message): a chat is
  busy while its op runs, and the platform's latency in one chat does not hold the others;
- order: ready ops of idle chats by priority (send > delete > edit), then by first
  submission; so within a chat, sends go before deletes before edits;
- per chat: an op that made a request delays that chat's next op by its `interval`;
- `RateLimited(retry_after)` pauses the whole outbox (the platform's flood control is per
  bot) and requeues the op, which then runs with the latest state: never a duplicate.
  Requests already in flight in other chats finish; no new one starts until the pause ends.

One dispatcher task picks ops and starts one task per op, at most `workers` at a time;
`aclose` cancels the dispatcher and every running op and waits for all of them.

Time is injected (`clock`, `sleep`) so tests run on a fake clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum
from types import TracebackType

from adapters.errors import RateLimited

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Action = Callable[[], Awaitable[bool]]
"""Performs the op with the latest state; returns whether it made a request (only
requests consume the chat's pace). Raise `RateLimited` to pause and be retried; every
other exception is the action's own business (it is logged and the op dropped)."""


class Priority(IntEnum):
    SEND = 0
    DELETE = 1
    EDIT = 2


@dataclass(slots=True)
class _Op:
    chat: Hashable
    key: Hashable
    priority: Priority
    action: Action
    interval: float
    seq: int
    on_drop: Callable[[], None] | None


class Outbox:
    """Shared by every renderer of one platform adapter; see the module docstring."""

    def __init__(
        self, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep, workers: int = 8
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._clock = clock
        self._sleep = sleep
        self._workers = workers
        self._pending: dict[Hashable, _Op] = {}
        self._next_at: dict[Hashable, float] = {}
        self._retry_at = 0.0
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight: dict[Hashable, tuple[_Op, asyncio.Task[None]]] = {}
        """Busy chats → the op in flight and the task running it."""
        self._worker: asyncio.Task[None] | None = None
        """The dispatcher."""
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        self._ensure_worker()

    async def __aenter__(self) -> Outbox:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Drop pending ops (their `on_drop` runs) and stop the dispatcher; in-flight
        requests are cancelled (their `on_drop` runs too) and awaited. Idempotent."""
        if self._closed:
            return
        self._closed = True
        dropped, self._pending = list(self._pending.values()), {}
        for op in dropped:
            self._notify_drop(op)
        worker, self._worker = self._worker, None
        current = asyncio.current_task()  # an action may close the outbox it runs in
        flying = [(op, t) for op, t in self._in_flight.values() if t is not current]
        tasks = [t for t in (worker, *(t for _, t in flying)) if t is not None]
        for task in tasks:
            task.cancel()
        try:
            # Their cancellation comes back as results; ours (if any) still propagates.
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for op, task in flying:  # cancelled before its first step: `_execute` never ran
                entry = self._in_flight.get(op.chat)
                if task.done() and entry is not None and entry[1] is task:
                    del self._in_flight[op.chat]
                    self._notify_drop(op)
            self._idle.set()

    def _ensure_worker(self) -> None:
        if self._closed:
            raise RuntimeError("outbox is closed")
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._dispatch(), name="outbox")

    # -- API -----------------------------------------------------------------------

    def submit(
        self,
        chat: Hashable,
        key: Hashable,
        action: Action,
        *,
        priority: Priority = Priority.EDIT,
        interval: float = 1.0,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        """Queue `action` under `key`. If `key` is already pending, the newer action and the
        higher priority win and the op keeps its place. If `key` is in flight, the new op
        runs after it (a chat has one op in flight at a time). `on_drop` runs if the outbox
        closes before the op ran or while it was running."""
        self._ensure_worker()
        existing = self._pending.get(key)
        if existing is not None:
            existing.action = action
            existing.priority = min(existing.priority, priority)
            existing.interval = interval
            existing.on_drop = on_drop
        else:
            self._pending[key] = _Op(chat, key, priority, action, interval, next(self._seq), on_drop)
        self._idle.clear()
        self._wakeup.set()

    def discard(self, key: Hashable) -> bool:
        """Forget the pending op under `key` (an in-flight one finishes); True if one was."""
        op = self._pending.pop(key, None)
        if op is not None and not self._pending and not self._in_flight:
            self._idle.set()
        return op is not None

    def pause_for(self, seconds: float) -> None:
        """Hold every chat for `seconds` (a 429 seen outside the outbox, e.g. on typing)."""
        self._retry_at = max(self._retry_at, self._clock() + seconds)
        self._wakeup.set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def paused_until(self) -> float:
        return self._retry_at

    @property
    def paused(self) -> bool:
        return self._clock() < self._retry_at

    async def drain(self) -> None:
        """Wait until nothing is pending or in flight."""
        await self._idle.wait()

    # -- dispatcher and op tasks -------------------------------------------------------

    def _ready_at(self, op: _Op) -> float:
        return max(self._next_at.get(op.chat, float("-inf")), self._retry_at)

    def _waiting(self) -> list[_Op]:
        """Pending ops whose chat has nothing in flight (a busy chat wakes us when done)."""
        return [op for op in self._pending.values() if op.chat not in self._in_flight]

    def _pick(self, now: float) -> _Op | None:
        ready = [op for op in self._waiting() if self._ready_at(op) <= now]
        return min(ready, key=lambda op: (op.priority, op.seq)) if ready else None

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock()
            while len(self._in_flight) < self._workers and (op := self._pick(now)) is not None:
                del self._pending[op.key]
                task = loop.create_task(self._execute(op), name="outbox.op")
                self._in_flight[op.chat] = (op, task)
            wait: float | None = None
            if not self._pending and not self._in_flight:
                self._next_at = {c: t for c, t in self._next_at.items() if t > now}
                self._idle.set()
            elif len(self._in_flight) < self._workers and (waiting := self._waiting()):
                wait = min(self._ready_at(o) for o in waiting) - now
            self._wakeup.clear()
            await self._wait(wait)

    async def _execute(self, op: _Op) -> None:
        """Run one op in its own task; the chat is busy (in `_in_flight`) until it ends."""
        started = self._clock()
        made_request = True
        try:
            made_request = await op.action()
        except RateLimited as exc:
            self._retry_at = max(self._retry_at, self._clock() + exc.retry_after)
            log.warning("outbox.rate_limited chat=%s retry_after=%.1f", op.chat, exc.retry_after)
            # Retry the same action: it reads the latest state, so nothing is duplicated.
            if not self._closed:
                newer = self._pending.setdefault(op.key, op)
                newer.seq = min(newer.seq, op.seq)
            else:
                self._notify_drop(op)
        except Exception:  # task boundary: one failing action must not stop the outbox
            log.exception("outbox.action_failed chat=%s key=%s", op.chat, op.key)
        except asyncio.CancelledError:
            self._notify_drop(op)  # closing mid-request: the submitter must not wait for it
            raise
        finally:
            if made_request:
                self._next_at[op.chat] = max(self._next_at.get(op.chat, 0.0), started + op.interval)
            del self._in_flight[op.chat]
            self._wakeup.set()

    async def _wait(self, delay: float | None) -> None:
        """Sleep for `delay` (None: indefinitely) or until woken: an op submitted or
        finished, or a pause set."""
        if delay is not None and delay <= 0:
            return
        waker = asyncio.ensure_future(self._wakeup.wait())
        if delay is None:
            try:
                await waker
            finally:
                waker.cancel()
            return
        sleeper = asyncio.ensure_future(self._sleep(delay))
        try:
            await asyncio.wait((waker, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waker, sleeper):
                task.cancel()
            # Children's cancellation comes back as a result; ours still propagates.
            await asyncio.gather(waker, sleeper, return_exceptions=True)

    def _notify_drop(self, op: _Op) -> None:
        if op.on_drop is None:
            return
        try:
            op.on_drop()
        except Exception:
            log.exception("outbox.on_drop_failed key=%s", op.key)
