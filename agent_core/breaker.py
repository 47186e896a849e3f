"""One circuit breaker per model, shared by every session and scheduled job of the process.

closed ──3 consecutive failures──▶ open ──cooldown (60 s) passes──▶ half-open: ONE probe
   ▲                                 ▲                                      │
   └────────── probe succeeds ───────┴────────── probe fails ───────────────┘

While open (and while a probe is in flight) callers are refused a permit and go to the next
model. Only failures that say something about the model's health count (rate limits,
overload, 5xx, dropped or stalled streams); a rejected request or a cancelled run is neutral.
State lives in memory only: a restart starts every breaker closed, so a provider that
recovered while we were down is never blocked by a saved cooldown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

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
    """The process's breakers, one per model name, created on first use."""

    def __init__(
        self,
        *,
        threshold: int = 3,
        cooldown_s: float = 60.0,
        clock: Clock = time.monotonic,
        on_change: Callable[[Breakers], None] | None = None,
    ) -> None:
        self._threshold = threshold
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._on_change = on_change
        self._by_model: dict[str, CircuitBreaker] = {}

    def for_model(self, model: str) -> CircuitBreaker:
        breaker = self._by_model.get(model)
        if breaker is None:
            breaker = CircuitBreaker(
                model, threshold=self._threshold, cooldown_s=self._cooldown_s, clock=self._clock,
                on_change=self._changed,
            )  # fmt: skip
            self._by_model[model] = breaker
        return breaker

    def statuses(self) -> list[BreakerStatus]:
        return [b.status() for b in self._by_model.values()]

    def __iter__(self) -> Iterator[CircuitBreaker]:
        return iter(list(self._by_model.values()))

    def _changed(self, _breaker: CircuitBreaker) -> None:
        if self._on_change is not None:
            self._on_change(self)
