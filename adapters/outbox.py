"""One outbox per platform adapter: keyed, coalescing, paced per chat, paused on 429.

Callers submit *actions* under a key (e.g. one per message). An action reads the latest
state when it runs, so a key pending while newer text arrives still sends only the newest
text: intermediate states are skipped for free. Rules:

- one pending op per key; resubmitting keeps the op's place in line (fairness);
- one worker, so at most one request is in flight — per message and overall;
- order: ready ops by priority (send > delete > edit), then by first submission;
- per chat: an op that made a request delays that chat's next op by its `interval`;
- `RateLimited(retry_after)` pauses the whole outbox (the platform's flood control is per
  bot) and requeues the op, which then runs with the latest state: never a duplicate.

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

    def __init__(self, *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._pending: dict[Hashable, _Op] = {}
        self._next_at: dict[Hashable, float] = {}
        self._retry_at = 0.0
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight: _Op | None = None
        self._worker: asyncio.Task[None] | None = None
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
        """Drop pending ops (their `on_drop` runs) and stop the worker; an in-flight request
        is cancelled. Idempotent."""
        if self._closed:
            return
        self._closed = True
        dropped, self._pending = list(self._pending.values()), {}
        for op in dropped:
            self._notify_drop(op)
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        self._idle.set()

    def _ensure_worker(self) -> None:
        if self._closed:
            raise RuntimeError("outbox is closed")
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="outbox")

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
        runs after it. `on_drop` runs if the outbox closes before the op ran or while it
        was running."""
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
        if op is not None and not self._pending and self._in_flight is None:
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

    # -- worker ----------------------------------------------------------------------

    def _ready_at(self, op: _Op) -> float:
        return max(self._next_at.get(op.chat, float("-inf")), self._retry_at)

    def _pick(self, now: float) -> _Op | None:
        ready = [op for op in self._pending.values() if self._ready_at(op) <= now]
        return min(ready, key=lambda op: (op.priority, op.seq)) if ready else None

    async def _run(self) -> None:
        while True:
            now = self._clock()
            op = self._pick(now)
            if op is None:
                if not self._pending:
                    self._next_at = {c: t for c, t in self._next_at.items() if t > now}
                    self._idle.set()
                    wait: float | None = None
                else:
                    wait = min(self._ready_at(o) for o in self._pending.values()) - now
                self._wakeup.clear()
                await self._wait(wait)
                continue
            del self._pending[op.key]
            await self._execute(op)

    async def _execute(self, op: _Op) -> None:
        self._in_flight = op
        started = self._clock()
        made_request = True
        try:
            made_request = await op.action()
        except RateLimited as exc:
            self._retry_at = max(self._retry_at, self._clock() + exc.retry_after)
            log.warning("outbox.rate_limited chat=%s retry_after=%.1f", op.chat, exc.retry_after)
            # Retry the same action: it reads the latest state, so nothing is duplicated.
            newer = self._pending.setdefault(op.key, op)
            newer.seq = min(newer.seq, op.seq)
        except Exception:  # task boundary: one failing action must not stop the outbox
            log.exception("outbox.action_failed chat=%s key=%s", op.chat, op.key)
        except asyncio.CancelledError:
            self._notify_drop(op)  # closing mid-request: the submitter must not wait for it
            raise
        finally:
            self._in_flight = None
        if made_request:
            self._next_at[op.chat] = max(self._next_at.get(op.chat, 0.0), started + op.interval)

    async def _wait(self, delay: float | None) -> None:
        """Sleep for `delay` (None: indefinitely) or until something is submitted."""
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
