"""One run at a time per session, many sessions at once.

Each session key gets a lane: a bounded queue and a worker task that lives while there is
work. Messages arriving during a run wait in the queue and are handed to the next run —
all of them at once in `collect` mode, one per run in `followup` mode. Nothing is dropped
silently: a full queue is refused with `LaneFull`, which the caller tells the user about.

The queue here is only the in-memory order of work: every item is already durable in the
inbox (bot/storage/inbox.py) before it is submitted, so what `aclose` returns, or what a
crash leaves, is handed to the lanes again at the next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[str, list[T]], Awaitable[None]]


class LaneFull(Exception):
    pass


class LanesClosed(LaneFull):
    """Shutting down: nothing new is started."""


@dataclass
class _Lane(Generic[T]):
    queue: list[T] = field(default_factory=list)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None


class Lanes(Generic[T]):
    def __init__(
        self,
        handler: Handler[T],
        *,
        mode: Literal["collect", "followup"] = "collect",
        max_concurrent: int = 16,
        max_queued: int = 100,
    ) -> None:
        self._handler = handler
        self._mode = mode
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_queued = max_queued
        self._lanes: dict[str, _Lane[T]] = {}
        self._closed = False

    def submit(self, key: str, item: T) -> int:
        """Queue an item for the session; returns how many items wait before it runs
        (0 = it starts now)."""
        if self._closed:
            raise LanesClosed("I'm restarting right now")
        lane = self._lanes.setdefault(key, _Lane())
        if len(lane.queue) >= self._max_queued:
            raise LaneFull(f"{len(lane.queue)} messages are already waiting in this chat")
        lane.queue.append(item)
        busy = lane.current is not None
        if lane.worker is None:
            lane.worker = asyncio.create_task(self._work(key, lane), name=f"lane:{key}")
        return len(lane.queue) if busy else len(lane.queue) - 1

    def is_busy(self, key: str) -> bool:
        lane = self._lanes.get(key)
        return lane is not None and lane.current is not None

    def queued(self, key: str) -> int:
        lane = self._lanes.get(key)
        return len(lane.queue) if lane else 0

    def stop(self, key: str) -> bool:
        """Cancel the session's running run (queued messages stay queued)."""
        lane = self._lanes.get(key)
        if lane is None or lane.current is None or lane.current.done():
            return False
        lane.current.cancel()
        return True

    async def _work(self, key: str, lane: _Lane[T]) -> None:
        try:
            while lane.queue:
                if self._mode == "collect":
                    batch, lane.queue = lane.queue, []
                else:
                    batch = [lane.queue.pop(0)]
                async with self._slots:
                    lane.current = asyncio.create_task(self._handler(key, batch), name=f"run:{key}")
                    try:
                        await lane.current
                    except asyncio.CancelledError:
                        # Our own cancellation (shutdown) propagates; a /stop only ends the run.
                        current_task = asyncio.current_task()
                        if current_task is not None and current_task.cancelling():
                            lane.current.cancel()
                            raise
                    except Exception:
                        log.exception("lane.run_crashed", extra={"session": key})
                    finally:
                        lane.current = None
        finally:
            lane.worker = None
            if not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]

    async def drain(self) -> None:
        """Wait until every lane is idle (used by tests and graceful shutdown)."""
        while workers := [l.worker for l in self._lanes.values() if l.worker is not None]:
            await asyncio.gather(*workers, return_exceptions=True)

    async def aclose(self) -> list[tuple[str, T]]:
        """Cancel running runs; return the queued items no run will answer now, so the
        caller can tell their senders instead of dropping them silently."""
        self._closed = True
        unanswered = [(key, item) for key, lane in self._lanes.items() for item in lane.queue]
        for lane in self._lanes.values():
            lane.queue.clear()
        workers = [l.worker for l in self._lanes.values() if l.worker is not None]
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._lanes.clear()
        return unanswered
