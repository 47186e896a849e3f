"""A strict, recording `ChatTransport` and a fake clock for renderer/outbox tests.

`FakeClock` stands in for `time.monotonic` + `asyncio.sleep`: sleepers wake only when a
test advances time, so a test of "edits ≥ 1 s apart" runs instantly and deterministically.
`FakeTransport` keeps the chat's messages, enforces the limit like the platform
(`MessageTooLong`), rejects empty text, answers "not modified" as success but counts it
(a wasted request), rejects invalid entities with `FormattingRejected`, and can be told to
fail the Nth send/edit with any error (e.g. `RateLimited(2.0)`), or post the Nth send and
then lose its answer (`lose_answer`: it raises `DeliveryUnknown`). `ProbingTransport` can
also look for such a lost message (`find_sent`), as the Telegram transport does.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Hashable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from adapters.errors import DeliveryError, DeliveryUnknown, FormattingRejected, MessageGone, MessageTooLong
from adapters.render.entities import Entity, valid_entities
from adapters.render.utf16 import Unit, measure

T = TypeVar("T")


class FakeClock:
    """Virtual monotonic time. `clock()` reads it, `await clock.sleep(d)` waits for it."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(delay, 0.0), next(self._seq), fut))
        await fut

    def _next_deadline(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():  # cancelled sleeper
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    @staticmethod
    async def settle(rounds: int = 50) -> None:
        """Let every ready task run (a bounded number of loop turns, no real time)."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in deadline order and letting them run."""
        target = self.now + seconds
        await self.settle()
        while (deadline := self._next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            while self._sleepers and self._sleepers[0][0] <= self.now:
                _, _, fut = heapq.heappop(self._sleepers)
                if not fut.done():
                    fut.set_result(None)
            await self.settle()
        self.now = target
        await self.settle()

    async def run(self, aw: Awaitable[T], limit: float = 600.0) -> T:
        """Await `aw`, advancing time to the next sleeper whenever everything is blocked."""
        task = asyncio.ensure_future(aw)
        end = self.now + limit
        while True:
            await self.settle()
            if task.done():
                return task.result()
            deadline = self._next_deadline()
            if deadline is None or deadline > end:
                task.cancel()
                raise AssertionError(f"deadlock or timeout at t={self.now:.3f}")
            await self.advance(deadline - self.now)


@dataclass(frozen=True, slots=True)
class Call:
    kind: Literal["send", "edit", "delete", "typing"]
    at: float
    message_id: str | None = None
    text: str = ""
    entities: tuple[Entity, ...] = ()
    error: str | None = None


@dataclass(slots=True)
class Message:
    text: str
    entities: tuple[Entity, ...]
    edits: int = 0


@dataclass
class FakeTransport:
    """Records every request with its fake-clock time; see the module docstring."""

    clock: FakeClock
    chat_key: Hashable = "chat-1"
    limit_units: int = 4096
    unit: Unit = "utf16"
    min_edit_interval_s: float = 1.0
    renders_markdown: bool = False
    reject_entities: bool = False
    latency: float = 0.0
    """Fake seconds each request takes (lets tests see overlapping requests)."""
    fail: dict[tuple[str, int], Exception] = field(default_factory=dict)
    """(kind, n) → error raised by the n-th (1-based) request of that kind."""
    lose_answer: set[int] = field(default_factory=set)
    """n of the sends that are posted, then raise `DeliveryUnknown` (answer lost)."""
    answered: set[str] = field(default_factory=set)
    """Ids of the messages whose id the caller got back."""
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, Message] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    not_modified: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    """Most send/edit/delete requests ever running at once."""
    _counts: dict[str, int] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(100))

    async def _request(self, kind: str) -> None:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        counted = kind != "typing"  # message requests; a chat action may overlap them
        self.in_flight += counted
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await self.clock.sleep(self.latency)
        finally:
            self.in_flight -= counted
        error = self.fail.pop((kind, self._counts[kind]), None)
        if error is not None:
            self.calls.append(Call(kind, self.clock(), error=type(error).__name__))  # type: ignore[arg-type]
            raise error

    def _check(self, text: str, entities: list[Entity]) -> None:
        if not text.strip():
            raise DeliveryError("Bad Request: message text is empty")
        if measure(text, self.unit) > self.limit_units:
            raise MessageTooLong(f"{measure(text, self.unit)} > {self.limit_units}")
        if entities and (self.reject_entities or valid_entities(text, entities) != list(entities)):
            raise FormattingRejected("Bad Request: can't parse entities")

    async def send(self, text: str, entities: list[Entity]) -> str:
        await self._request("send")
        self._check(text, entities)
        mid = str(next(self._ids))
        self.messages[mid] = Message(text, tuple(entities))
        self.order.append(mid)
        self.calls.append(Call("send", self.clock(), mid, text, tuple(entities)))
        if self._counts["send"] in self.lose_answer:
            raise DeliveryUnknown("connection reset after the request was written")
        self.answered.add(mid)
        return mid

    async def edit(self, message_id: str, text: str, entities: list[Entity]) -> None:
        await self._request("edit")
        msg = self.messages.get(message_id)
        if msg is None:
            raise MessageGone(f"message {message_id} not found")
        self._check(text, entities)
        self.calls.append(Call("edit", self.clock(), message_id, text, tuple(entities)))
        if msg.text == text and msg.entities == tuple(entities):
            self.not_modified += 1  # Telegram: "message is not modified" — success, but wasted
            return
        msg.text, msg.entities = text, tuple(entities)
        msg.edits += 1

    async def delete(self, message_id: str) -> None:
        await self._request("delete")
        self.calls.append(Call("delete", self.clock(), message_id))
        if self.messages.pop(message_id, None) is not None:
            self.order.remove(message_id)

    async def typing(self) -> None:
        await self._request("typing")
        self.calls.append(Call("typing", self.clock()))

    # -- inspection ------------------------------------------------------------------

    def of(self, kind: str) -> list[Call]:
        return [c for c in self.calls if c.kind == kind and c.error is None]

    def texts(self) -> list[str]:
        """The chat as a user sees it now: message texts in order."""
        return [self.messages[mid].text for mid in self.order]

    def user_deletes(self, message_id: str) -> None:
        """Simulate a user deleting a message (the next edit raises MessageGone)."""
        self.messages.pop(message_id)
        self.order.remove(message_id)


@dataclass
class ProbingTransport(FakeTransport):
    """A `FakeTransport` that can find a message whose send answer was lost."""

    probes: int = 0

    async def find_sent(self, text: str, entities: list[Entity]) -> str | None:
        await self._request("probe")
        self.probes += 1
        for mid in self.order:
            msg = self.messages[mid]
            if mid not in self.answered and (msg.text, msg.entities) == (text, tuple(entities)):
                self.answered.add(mid)
                return mid
        return None
