"""One run at a time per session, many sessions at once.

Each session key gets a lane: a bounded queue and a worker task that lives while there is
work. What happens to messages arriving during a run is the session's queue mode:

- `collect` (default): they wait, then all go to the next run together;
- `followup`: they wait, one run each;
- `steer`: the running run takes them at its next tool boundary (`take_queued`, called by
  the run's steer hook); whatever it does not take goes to the next run, as in collect;
- `interrupt`: the running run is cancelled (like /stop) once it has stored its message,
  and they start the next run (a scheduled job's run is never interrupted: they wait; and a
  job falling due interrupts nothing: it is submitted with `interrupts=False` and waits).

Nothing is dropped silently: a full queue is refused with `LaneFull`, which the caller tells
the user about, and order is kept in every mode.

The queue here is only the in-memory order of work: every item is already durable in the
inbox (bot/storage/inbox.py) before it is submitted, so what `aclose` returns, or what a
crash leaves, is handed to the lanes again at the next start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, get_args

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[str, list[T]], Awaitable[None]]
QueueMode = Literal["collect", "followup", "steer", "interrupt"]
QUEUE_MODES: tuple[QueueMode, ...] = get_args(QueueMode)


class LaneFull(Exception):
    pass


class LanesClosed(LaneFull):
    """Shutting down: nothing new is started."""


@dataclass
class _Lane(Generic[T]):
    queue: list[T] = field(default_factory=list)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None
    started: bool = False
    """The running run has stored its user message (`Lanes.started`): interrupting it now
    loses nothing."""
    interrupt_pending: bool = False
    """A message in `interrupt` mode arrived before the run started: cancelled once it has."""
    answered: bool = False
    """The running run's answer is complete (it is only closing up): a message arriving now
    is next in line, not waiting for an answer, and is never a reason to interrupt."""


class Lanes(Generic[T]):
    def __init__(
        self,
        handler: Handler[T],
        *,
        mode: QueueMode = "collect",
        max_concurrent: int = 16,
        max_queued: int = 100,
    ) -> None:
        self._handler = handler
        self.default_mode: QueueMode = mode
        self._modes: dict[str, QueueMode] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_queued = max_queued
        self._lanes: dict[str, _Lane[T]] = {}
        self._closed = False
        # Replicas on one PostgreSQL (bot.lane_claims): items other replicas queued for a
        # session join its lane before each run (`refill`, merged by `order`), and the lane,
        # once empty, is let go (`on_idle`). None in a single process.
        self.refill: Callable[[str], Awaitable[list[T]]] | None = None
        self.order: Callable[[T], int] | None = None
        self.on_idle: Callable[[str], Awaitable[None]] | None = None

    def submit(self, key: str, item: T, *, interrupts: bool = True) -> int:
        """Queue an item for the session; returns how many items wait before it runs
        (0 = it starts now). In interrupt mode it stops the running run unless `interrupts`
        is False (work nobody just asked for, like a scheduled job, or a message while the
        running run waits on someone's answer)."""
        if self._closed:
            raise LanesClosed("I'm restarting right now")
        lane = self._lanes.setdefault(key, _Lane())
        if len(lane.queue) >= self._max_queued:
            raise LaneFull(f"{len(lane.queue)} messages are already waiting in this chat")
        lane.queue.append(item)
        busy = lane.current is not None and not lane.answered
        if busy and interrupts and self.mode_of(key) == "interrupt":
            # Never before the run has stored its messages: cancelled earlier, they would
            # be marked answered without having reached the transcript.
            lane.interrupt_pending = True
            if lane.started:
                self._interrupt(lane)
        if lane.worker is None:
            lane.worker = asyncio.create_task(self._work(key, lane), name=f"lane:{key}")
        return len(lane.queue) if busy else len(lane.queue) - 1

    def answered(self, key: str) -> None:
        """The session's running run has delivered its outcome; what remains is closing up."""
        lane = self._lanes.get(key)
        if lane is not None and lane.current is not None:
            lane.answered = True

    def mode_of(self, key: str) -> QueueMode:
        return self._modes.get(key, self.default_mode)

    def set_mode(self, key: str, mode: QueueMode | None) -> None:
        """The session's mode from now on (None = the default); applies to the next message."""
        if mode is None:
            self._modes.pop(key, None)
        else:
            self._modes[key] = mode

    def load_modes(self, modes: dict[str, str]) -> None:
        """Sessions' stored modes, at start-up (unknown values are ignored)."""
        for key, mode in modes.items():
            if mode in QUEUE_MODES:
                self._modes[key] = mode  # type: ignore[assignment]

    async def take_in(self, key: str) -> None:
        """Bring what other replicas queued for the running session into its lane, in order
        (a steering run takes them too, not only what reached this replica)."""
        lane = self._lanes.get(key)
        if lane is not None and self.refill is not None:
            await self._refilled(key, lane)

    def take_queued(self, key: str, accept: Callable[[T], bool] = lambda _: True) -> list[T]:
        """For a steering run: remove and return the queued items it may take, in order,
        up to the first it may not (order is kept: nothing overtakes an item left queued)."""
        lane = self._lanes.get(key)
        if lane is None:
            return []
        taken: list[T] = []
        while lane.queue and accept(lane.queue[0]):
            taken.append(lane.queue.pop(0))
        return taken

    def requeue(self, key: str, items: list[T]) -> None:
        """Put items back at the front of the session's queue, in order (a batch a job
        split, a steer that was cancelled). Never refused: they were already counted once."""
        if not items:
            return
        lane = self._lanes.setdefault(key, _Lane())
        lane.queue[:0] = items
        if lane.worker is None and not self._closed:
            lane.worker = asyncio.create_task(self._work(key, lane), name=f"lane:{key}")

    def started(self, key: str) -> None:
        """The session's running run has stored its user message (its RunStarted event); an
        interrupt that waited for this happens now."""
        lane = self._lanes.get(key)
        if lane is None or lane.current is None:
            return
        lane.started = True
        if lane.interrupt_pending:
            self._interrupt(lane)

    def interrupt(self, key: str) -> bool:
        """A message another replica queued for this session in interrupt mode: the running
        run stops as `submit` would stop it (once it has stored its message; not a run
        whose answer is complete). The caller checks the mode and a waiting question."""
        lane = self._lanes.get(key)
        if lane is None or lane.current is None or lane.answered:
            return False
        lane.interrupt_pending = True
        if lane.started:
            self._interrupt(lane)
        return True

    @staticmethod
    def _interrupt(lane: _Lane[T]) -> None:
        lane.interrupt_pending = False
        if lane.current is not None and not lane.current.done():
            lane.current.cancel()

    def active(self, key: str) -> bool:
        """The session has a lane here (running or with work queued)."""
        return key in self._lanes

    def is_busy(self, key: str) -> bool:
        lane = self._lanes.get(key)
        return lane is not None and lane.current is not None

    def queued(self, key: str) -> int:
        lane = self._lanes.get(key)
        return len(lane.queue) if lane else 0

    def depths(self) -> dict[str, tuple[bool, int]]:
        """Every lane with a run going or messages waiting: (running, queued), for views."""
        return {
            key: (lane.current is not None, len(lane.queue))
            for key, lane in self._lanes.items()
            if lane.current is not None or lane.queue
        }

    def stop(self, key: str) -> bool:
        """Cancel the session's running run (queued messages stay queued)."""
        lane = self._lanes.get(key)
        if lane is None or lane.current is None or lane.current.done():
            return False
        lane.current.cancel()
        return True

    async def _work(self, key: str, lane: _Lane[T]) -> None:
        idle = False
        try:
            while await self._refilled(key, lane):
                if self.mode_of(key) == "followup":
                    batch = [lane.queue.pop(0)]
                else:
                    batch, lane.queue = lane.queue, []
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
                        lane.started = lane.interrupt_pending = lane.answered = False
        finally:
            lane.worker = None
            if not lane.queue and self._lanes.get(key) is lane:
                del self._lanes[key]
                idle = True
        if idle and self.on_idle is not None and not self._closed:
            await self.on_idle(key)

    async def _refilled(self, key: str, lane: _Lane[T]) -> bool:
        """Whether the lane has work, after taking in what other replicas queued for it."""
        if self.refill is not None and not self._closed:
            try:
                more = await self.refill(key)
            except Exception:  # the database is away: what is here runs, the rest waits there
                log.warning("lane.refill_failed", extra={"session": key}, exc_info=True)
                more = []
            lane.queue.extend(more)
            if self.order is not None:  # also what was submitted here while refill looked
                lane.queue.sort(key=self.order)
        return bool(lane.queue)

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
