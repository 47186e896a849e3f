"""One circuit breaker per model, shared by every session and scheduled job of the process.

closed ──3 consecutive failures──▶ open ──cooldown (60 s) passes──▶ half-open: ONE probe
   ▲                                 ▲                                      │
   └────────── probe succeeds ───────┴────────── probe fails ───────────────┘

While open (and while a probe is in flight) callers are refused a permit and go to the next
model. Only failures that say something about the model's health count (rate limits,
overload, 5xx, dropped or stalled streams); a rejected request or a cancelled run is neutral.

One process (SQLite): state lives in memory only, so a restart starts every breaker closed
and a provider that recovered while we were down is never blocked by a saved cooldown.
Replicas on one database (`Breakers(store=…)`): the state above is shared — every permit
asks the store for the model's state first, a failure is counted there, so a model one
replica found down is skipped by all, and the half-open probe is claimed in the store by one
replica (for at most `cooldown_s`, so a prober that died frees it). Shared times are wall
clock (the replicas' clocks must agree to a second or so). A store that fails leaves each
replica to its own view until it answers again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

log = logging.getLogger(__name__)

State = Literal["closed", "open", "half_open"]
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    """A snapshot for /status and `roost doctor`."""

    model: str
    state: State
    failures: int
    """Consecutive failures counted so far."""
    retry_in_s: float | None
    """While open: seconds until a probe is allowed."""
    last_error: str = ""

    def describe(self) -> str:
        if self.state == "closed":
            tail = f" ({self.failures} recent failure{'s' * (self.failures != 1)})" if self.failures else ""
            return f"{self.model}: ok{tail}"
        if self.state == "half_open":
            return f"{self.model}: probing after {self.last_error or 'failures'}"
        wait = f", next try in {self.retry_in_s:.0f} s" if self.retry_in_s is not None else ""
        return f"{self.model}: unavailable ({self.last_error or 'failures'}){wait}"


@dataclass(frozen=True, slots=True)
class SharedState:
    """A model's breaker as every replica sees it (times: epoch seconds)."""

    state: Literal["closed", "open"] = "closed"
    failures: int = 0
    opened_at: float = 0.0
    last_error: str = ""
    prober: str | None = None
    """The replica making the half-open probe, until `probe_until`."""
    probe_until: float | None = None


class BreakerStore(Protocol):
    """Where replicas sharing one database keep their breakers (bot.storage implements it).
    `change_breaker` must apply `change` atomically: no other change of the same model lands
    between its read and its write. A model never stored is `SharedState()` (closed)."""

    async def load_breaker(self, model: str) -> SharedState: ...

    async def load_breakers(self) -> dict[str, SharedState]: ...

    async def change_breaker(self, model: str, change: Callable[[SharedState], SharedState]) -> SharedState: ...


class Permit:
    """Leave to call a model once. Report `success()` or `failure()`; `release()` (always
    called, e.g. in a finally) ends a permit that got neither, as a neutral outcome."""

    __slots__ = ("_breaker", "probe", "_done")

    def __init__(self, breaker: CircuitBreaker, probe: bool) -> None:
        self._breaker = breaker
        self.probe = probe
        self._done = False

    def success(self) -> None:
        if not self._done:
            self._done = True
            self._breaker._succeeded(self)

    def failure(self, error: str) -> None:
        if not self._done:
            self._done = True
            self._breaker._failed(self, error)

    def release(self) -> None:
        if not self._done:
            self._done = True
            self._breaker._released(self)


class CircuitBreaker:
    def __init__(
        self,
        model: str,
        *,
        threshold: int = 3,
        cooldown_s: float = 60.0,
        clock: Clock = time.monotonic,
        on_change: Callable[[CircuitBreaker], None] | None = None,
    ) -> None:
        self.model = model
        self._threshold = threshold
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._on_change = on_change
        self._state: State = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probing = False
        self._last_error = ""

    @property
    def state(self) -> State:
        """As a caller would find it now: an open breaker whose cooldown has passed is
        half-open (a probe is allowed)."""
        if self._state == "open" and self._clock() - self._opened_at >= self._cooldown_s:
            return "half_open"
        return self._state

    def acquire(self) -> Permit | None:
        """A permit to call the model now, or None: go to the next model."""
        state = self.state
        if state == "closed":
            return Permit(self, probe=False)
        if self._probing:
            return None  # one probe at a time; everyone else goes elsewhere meanwhile
        if state == "half_open":
            self._probing = True
            self._set("half_open")
            log.info("llm.breaker_probe", extra={"model": self.model})
            return Permit(self, probe=True)
        return None

    def adopt(self, shared: SharedState) -> None:
        """Follow the state the replicas share (this process's probe in flight stays its own)."""
        before = (self.state, self._failures, self._last_error)
        if not self._probing:
            self._state = shared.state
        self._failures = shared.failures
        self._opened_at = shared.opened_at
        self._last_error = shared.last_error
        if (self.state, self._failures, self._last_error) != before:
            self._notify()

    def unprobe(self) -> None:
        """A probe this process was about to make went to another replica."""
        self._probing = False
        self._state = "open"

    def status(self) -> BreakerStatus:
        state = self.state
        retry_in = None
        if state == "open":
            retry_in = max(0.0, self._cooldown_s - (self._clock() - self._opened_at))
        return BreakerStatus(self.model, state, self._failures, retry_in, self._last_error)

    def _succeeded(self, permit: Permit) -> None:
        if permit.probe:
            self._probing = False
        was = self._state
        self._failures = 0
        self._last_error = ""
        if was != "closed":
            log.info("llm.breaker_closed", extra={"model": self.model})
        self._set("closed", notify=was != "closed")

    def _failed(self, permit: Permit, error: str) -> None:
        if permit.probe:
            self._probing = False
        self._failures += 1
        self._last_error = error
        if permit.probe or self._failures >= self._threshold:
            # (Re)open with a fresh cooldown: a failed probe waits a whole period again.
            self._opened_at = self._clock()
            log.warning(
                "llm.breaker_open", extra={"model": self.model, "failures": self._failures, "error": error}
            )
            self._set("open")
        elif self._state == "closed":
            self._notify()

    def _released(self, permit: Permit) -> None:
        if permit.probe:
            # A probe that ended without a verdict (cancelled, a bad request): the next
            # caller may probe at once.
            self._probing = False
            self._set("open", notify=False)

    def _set(self, state: State, *, notify: bool = True) -> None:
        self._state = state
        if notify:
            self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change(self)
            except Exception:  # reporting must never break a model call
                log.warning("llm.breaker_report_failed", exc_info=True)


class Breakers:
    """The process's breakers, one per model name, created on first use; with a `store`,
    shared with the other replicas (see the module docstring). Callers go through the async
    `acquire` / `succeeded` / `failed` / `release`, which keep the store in step."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        cooldown_s: float = 60.0,
        clock: Clock = time.monotonic,
        on_change: Callable[[Breakers], None] | None = None,
        store: BreakerStore | None = None,
    ) -> None:
        self._threshold = threshold
        self._cooldown_s = cooldown_s
        # Shared times must mean the same on every replica: the wall clock, unless injected.
        self._clock = time.time if store is not None and clock is time.monotonic else clock
        self._on_change = on_change
        self._by_model: dict[str, CircuitBreaker] = {}
        self._store = store
        self._me = uuid.uuid4().hex[:16]
        """This replica, as the prober it may become."""

    def for_model(self, model: str) -> CircuitBreaker:
        breaker = self._by_model.get(model)
        if breaker is None:
            breaker = CircuitBreaker(
                model, threshold=self._threshold, cooldown_s=self._cooldown_s, clock=self._clock,
                on_change=self._changed,
            )  # fmt: skip
            self._by_model[model] = breaker
        return breaker

    async def acquire(self, model: str) -> Permit | None:
        """A permit to call `model` now, or None: go to the next model."""
        breaker = self.for_model(model)
        if self._store is None:
            return breaker.acquire()
        shared = await self._shared(model, lambda store: store.load_breaker(model))
        if shared is None:
            return breaker.acquire()
        breaker.adopt(shared)
        now = self._clock()
        if shared.prober not in (None, self._me) and (shared.probe_until or 0.0) > now:
            return None  # another replica probes; everyone else goes elsewhere meanwhile
        permit = breaker.acquire()
        if permit is None or not permit.probe:
            return permit
        claimed = await self._shared(model, lambda store: store.change_breaker(model, self._claim(now)))
        if claimed is None or claimed.prober == self._me:
            return permit
        breaker.unprobe()
        breaker.adopt(claimed)
        return breaker.acquire() if claimed.state == "closed" else None  # recovered meanwhile

    async def succeeded(self, permit: Permit) -> None:
        breaker = permit._breaker
        recovered = permit.probe or breaker._failures > 0 or breaker._state != "closed"
        permit.success()
        if self._store is not None and recovered:  # a healthy call on a healthy model writes nothing
            await self._shared(breaker.model, lambda store: store.change_breaker(breaker.model, lambda _: SharedState()))

    async def failed(self, permit: Permit, error: str) -> None:
        breaker = permit._breaker
        probe = permit.probe
        permit.failure(error)
        if self._store is None:
            return
        now = self._clock()

        def counted(s: SharedState) -> SharedState:
            failures = s.failures + 1
            if probe or failures >= self._threshold:  # (re)open with a fresh cooldown
                return SharedState("open", failures, now, error)
            return replace(s, failures=failures, last_error=error)

        shared = await self._shared(breaker.model, lambda store: store.change_breaker(breaker.model, counted))
        if shared is not None:
            breaker.adopt(shared)

    async def release(self, permit: Permit) -> None:
        """Ends a permit that got no verdict (always called, e.g. in a finally)."""
        probing = permit.probe and not permit._done
        permit.release()
        if self._store is not None and probing:  # the next caller, on any replica, may probe at once
            me = self._me

            def freed(s: SharedState) -> SharedState:
                return replace(s, prober=None, probe_until=None) if s.prober == me else s

            model = permit._breaker.model
            await self._shared(model, lambda store: store.change_breaker(model, freed))

    async def refresh(self) -> None:
        """Take every model's shared state (before showing them, e.g. in /status)."""
        if self._store is None:
            return
        states = await self._shared("*", lambda store: store.load_breakers())
        for model, shared in (states or {}).items():
            self.for_model(model).adopt(shared)

    def statuses(self) -> list[BreakerStatus]:
        return [b.status() for b in self._by_model.values()]

    def __iter__(self) -> Iterator[CircuitBreaker]:
        return iter(list(self._by_model.values()))

    def _claim(self, now: float) -> Callable[[SharedState], SharedState]:
        me, cooldown = self._me, self._cooldown_s

        def claim(s: SharedState) -> SharedState:
            free = s.prober is None or s.prober == me or (s.probe_until or 0.0) <= now
            if s.state == "open" and now - s.opened_at >= cooldown and free:
                # Held for at most a cooldown: a prober that died frees it for the others.
                return replace(s, prober=me, probe_until=now + cooldown)
            return s

        return claim

    async def _shared(self, model: str, call: Callable[[BreakerStore], Any]) -> Any:
        """The store's answer, or None when it failed (this replica then goes by its own view)."""
        assert self._store is not None
        try:
            return await call(self._store)
        except Exception as exc:  # the database is away: a model call must not fail for it
            log.warning("llm.breaker_store_failed", extra={"model": model, "error": type(exc).__name__})
            return None

    def _changed(self, _breaker: CircuitBreaker) -> None:
        if self._on_change is not None:
            self._on_change(self)
