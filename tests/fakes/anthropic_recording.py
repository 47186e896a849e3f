"""What the fake Messages API saw: recorded requests, and waiting on them from any thread or loop."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tests.fakes.anthropic_script import Response

Outcome = Literal["answered", "dropped", "client_disconnected", "truncated"]
RequestsPredicate = Callable[[list["RecordedRequest"]], bool]
RecordKey = tuple[int, int]  # (reset generation, index into the log)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as received. ``headers`` has lower-cased names. ``json`` is ``None`` when
    the body did not parse. ``status`` is ``None`` while the answer is pending, or when the
    connection was dropped without one. ``served`` is the scripted/responder answer actually
    used (tool uses carrying their concrete ids); ``error`` is the error message sent, if any
    (including a mid-stream ``event: error``). ``outcome`` is ``None`` while in flight, then
    ``"answered"`` (fully sent), ``"dropped"`` (the script dropped the connection) or
    ``"client_disconnected"`` (the client hung up first, e.g. a cancelled stream) or
    ``"truncated"`` (the script ended the body early, see ``Truncate``)."""

    path: str
    headers: Mapping[str, str]
    body: bytes
    json: Any
    received_at: float
    status: int | None = None
    served: Response | None = None
    error: str | None = None
    outcome: Outcome | None = None


class RequestLog:
    """Thread-safe, append-only (until ``clear``) log of requests. Waiters — sync threads or
    coroutines on any event loop — are re-checked on every append and update."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._generation = 0
        self._async_waiters: list[
            tuple[RequestsPredicate, asyncio.AbstractEventLoop, asyncio.Future[None]]
        ] = []

    def snapshot(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def append(self, request: RecordedRequest) -> RecordKey:
        """Record ``request``; returns the key ``update`` needs."""
        with self._lock:
            self._requests.append(request)
            self._notify()
            return self._generation, len(self._requests) - 1

    def update(self, key: RecordKey, **changes: Any) -> None:
        generation, index = key
        with self._lock:
            if generation != self._generation:
                return  # clear() forgot this request while it was in flight
            self._requests[index] = dataclasses.replace(self._requests[index], **changes)
            self._notify()

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._requests.clear()

    def cancel_waiters(self) -> None:
        """Wake every coroutine still waiting with CancelledError (the fake is closing)."""
        with self._lock:
            for _, loop, future in self._async_waiters:
                loop.call_soon_threadsafe(_cancel_if_pending, future)
            self._async_waiters.clear()

    def wait_until(
        self, condition: RequestsPredicate, timeout: float, what: str
    ) -> list[RecordedRequest]:
        with self._changed:
            if not self._changed.wait_for(lambda: condition(list(self._requests)), timeout=timeout):
                raise TimeoutError(self._timeout_message(what, timeout))
            return list(self._requests)

    async def await_until(
        self, condition: RequestsPredicate, timeout: float, what: str
    ) -> list[RecordedRequest]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if _holds(condition, list(self._requests)):
                return list(self._requests)
            waiter = (condition, loop, future)
            self._async_waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            raise TimeoutError(_timeout_message(what, timeout, self.snapshot())) from None
        finally:
            with self._lock:
                if waiter in self._async_waiters:
                    self._async_waiters.remove(waiter)
        return self.snapshot()

    def _notify(self) -> None:
        """Wake sync and async waiters; call with the lock held."""
        self._changed.notify_all()
        snapshot = list(self._requests)
        for waiter in list(self._async_waiters):
            condition, loop, future = waiter
            try:
                if not _holds(condition, snapshot):
                    continue
                loop.call_soon_threadsafe(_resolve_if_pending, future)
            except Exception as exc:  # a broken test condition fails its waiter, not the server
                loop.call_soon_threadsafe(_fail_if_pending, future, exc)
            self._async_waiters.remove(waiter)


def _holds(condition: RequestsPredicate, requests: list[RecordedRequest]) -> bool:
    """``condition(requests)``, where indexing past the end means "not yet"."""
    try:
        return bool(condition(requests))
    except LookupError:
        return False


def _timeout_message(what: str, timeout: float, requests: list[RecordedRequest]) -> str:
    seen = [f"{r.path} -> {r.status}/{r.outcome}" for r in requests]
    return f"waited {timeout}s for {what}; saw {len(seen)} requests: {seen}"


def _resolve_if_pending(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fail_if_pending(future: asyncio.Future[None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _cancel_if_pending(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.cancel()
