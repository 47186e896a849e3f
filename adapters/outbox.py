"""One outbox per platform adapter: keyed, coalescing, paced per chat with bursts, paused on 429.

Callers submit *actions* under a key (e.g. one per message). An action reads the latest
state when it runs, so a key pending while newer text arrives still sends only the newest
text: intermediate states are skipped for free. Rules:

- one pending op per key; resubmitting keeps the op's place in line (fairness); a key
  belongs to one chat;
- up to `workers` requests in flight, but at most one per chat (so per message): a chat is
  busy while its op runs, and the platform's latency in one chat does not hold the others;
- order: ready ops of idle chats by priority (send > delete > edit), then by first
  submission; so within a chat, sends go before deletes before edits — except that right
  after a send, a ready edit or delete of that chat goes first: a flood of sends (notices)
  never holds a live reply's edits for more than one extra request;
- per chat, a token bucket (`Pace`): `burst` requests at once, refilled one per
  `interval` (the sustained rate), and at most `per_minute` in any 60 s if set; per key
  (one message), requests stay `interval` apart whatever the bucket holds. An op that made
  a request takes a token when it started;
- a best-effort op (`best_effort=True`, e.g. a "⏳ Got it" notice) never takes a slot
  another message needs: if, when its turn comes, its chat has a send waiting that is not
  best-effort, it is dropped unsent (`on_drop` runs) and that send goes instead;
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
from collections import deque
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


_STATE_LIMIT = 4096
"""Pacing entries (keys + chats) kept before the stale ones are swept while busy."""


class Priority(IntEnum):
    SEND = 0
    DELETE = 1
    EDIT = 2


@dataclass(frozen=True, slots=True)
class Pace:
    """How fast one chat may go. Telegram: one request a second sustained, short bursts
    tolerated, groups 20 a minute; edits of one message ≥ 1 s apart."""

    interval: float = 1.0
    """Sustained seconds per request in the chat, and the minimum gap per key (message)."""
    burst: int = 1
    """Requests a rested chat may make at once (the bucket's size)."""
    per_minute: int | None = None
    """Cap on requests in any 60 s, bursts included (None: no cap)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    full_at: float
    """When the bucket is full again (then it is forgotten, as if never used)."""

    def level(self, now: float, pace: Pace) -> float:
        if pace.interval <= 0:
            return float(pace.burst)
        return min(float(pace.burst), self.tokens + max(0.0, now - self.at) / pace.interval)

    def ready_at(self, now: float, pace: Pace) -> float:
        level = self.level(now, pace)
        return now if level >= 1.0 else now + (1.0 - level) * pace.interval


@dataclass(slots=True)
class _Op:
    chat: Hashable
    key: Hashable
    priority: Priority
    action: Action
    pace: Pace
    seq: int
    on_drop: Callable[[], None] | None
    paced: bool = True
    best_effort: bool = False


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
        self._buckets: dict[Hashable, _Bucket] = {}
        self._recent: dict[Hashable, deque[float]] = {}
        """Chats with a `per_minute` cap → start times of their requests in the last 60 s."""
        self._key_next_at: dict[Hashable, float] = {}
        self._last_sent: set[Hashable] = set()
        """Chats whose last op was a send: their next pick prefers an edit or delete."""
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
        pace: Pace | None = None,
        on_drop: Callable[[], None] | None = None,
        paced: bool = True,
        best_effort: bool = False,
    ) -> None:
        """Queue `action` under `key`. If `key` is already pending, the newer action and the
        higher priority win and the op keeps its place. If `key` is in flight, the new op
        runs after it (a chat has one op in flight at a time). `pace` (default: `interval`
        with no burst) should be the same for every op of a chat. `paced=False` declares
        that the action will make no request (e.g. it only records that a message already
        shows its final text): it runs as soon as its chat is free. `on_drop` runs if the
        outbox closes before the op ran or while it was running, and when a `best_effort`
        op is dropped (see the module docstring)."""
        self._ensure_worker()
        pace = pace if pace is not None else Pace(interval)
        existing = self._pending.get(key)
        if existing is not None:
            existing.action = action
            existing.priority = min(existing.priority, priority)
            existing.pace = pace
            existing.on_drop = on_drop
            existing.paced = paced
            existing.best_effort = best_effort
        else:
            self._pending[key] = _Op(chat, key, priority, action, pace, next(self._seq), on_drop, paced, best_effort)
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

    def _ready_at(self, op: _Op, now: float) -> float:
        if not op.paced:
            return now
        at = max(self._retry_at, self._key_next_at.get(op.key, float("-inf")))
        bucket = self._buckets.get(op.chat)
        if bucket is not None:
            at = max(at, bucket.ready_at(now, op.pace))
        recent = self._recent.get(op.chat)
        if op.pace.per_minute is not None and recent and len(recent) >= op.pace.per_minute:
            at = max(at, recent[-op.pace.per_minute] + 60.0)
        return at

    def _waiting(self) -> list[_Op]:
        """Pending ops whose chat has nothing in flight (a busy chat wakes us when done)."""
        return [op for op in self._pending.values() if op.chat not in self._in_flight]

    def _pick(self, now: float) -> _Op | None:
        best: dict[Hashable, _Op] = {}
        for op in self._waiting():
            if self._ready_at(op, now) > now:
                continue
            current = best.get(op.chat)
            if current is None or self._before(op, current):
                best[op.chat] = op
        for chat, op in list(best.items()):
            if op.best_effort and self._send_waits(chat, op):
                del self._pending[op.key]  # its turn would delay that send: dropped unsent
                self._notify_drop(op)
                del best[chat]  # the chat's next op is picked on the next round
        return min(best.values(), key=lambda op: (op.priority, op.seq)) if best else None

    def _send_waits(self, chat: Hashable, besides: _Op) -> bool:
        """Whether `chat` has a send pending that is not best-effort (other than `besides`)."""
        return any(
            op.chat == chat and op is not besides and op.priority == Priority.SEND and not op.best_effort
            for op in self._pending.values()
        )

    def _before(self, op: _Op, other: _Op) -> bool:
        """Within one chat: priority order, but after a send an edit or delete goes first."""
        if op.chat in self._last_sent and (op.priority == Priority.SEND) != (other.priority == Priority.SEND):
            return op.priority != Priority.SEND
        return (op.priority, op.seq) < (other.priority, other.seq)

    def _took(self, op: _Op, started: float) -> None:
        """Charge one request that started at `started` to the op's chat and key."""
        pace = op.pace
        bucket = self._buckets.get(op.chat)
        level = bucket.level(started, pace) if bucket is not None else float(pace.burst)
        full_at = started + (pace.burst - level + 1.0) * pace.interval
        self._buckets[op.chat] = _Bucket(level - 1.0, started, full_at)
        self._key_next_at[op.key] = max(self._key_next_at.get(op.key, 0.0), started + pace.interval)
        if pace.per_minute is not None:
            recent = self._recent.setdefault(op.chat, deque(maxlen=pace.per_minute))
            recent.append(started)

    def _forget_rested(self, now: float) -> None:
        """Drop pacing state that no longer constrains anything (safe at any time: a full
        bucket, an old window and a past key deadline are the same as none)."""
        self._buckets = {c: b for c, b in self._buckets.items() if b.full_at > now}
        self._recent = {c: r for c, r in self._recent.items() if r and now - r[-1] < 60.0}
        self._key_next_at = {k: t for k, t in self._key_next_at.items() if t > now}

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock()
            while len(self._in_flight) < self._workers and (op := self._pick(now)) is not None:
                del self._pending[op.key]
                if op.priority == Priority.SEND:
                    self._last_sent.add(op.chat)
                else:
                    self._last_sent.discard(op.chat)
                task = loop.create_task(self._execute(op), name="outbox.op")
                self._in_flight[op.chat] = (op, task)
            wait: float | None = None
            if len(self._key_next_at) + len(self._buckets) > _STATE_LIMIT:
                self._forget_rested(now)  # a busy outbox is never idle: keep its memory bounded
            if not self._pending and not self._in_flight:
                self._forget_rested(now)
                self._last_sent.clear()
                self._idle.set()
            elif len(self._in_flight) < self._workers and (waiting := self._waiting()):
                wait = min(self._ready_at(o, now) for o in waiting) - now
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
                self._took(op, started)
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
