"""Shared by the scheduler tests: a settable clock and waiting for a scheduler tick."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.scheduling.scheduler import Scheduler


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


async def tick(scheduler: Scheduler, timeout: float = 10.0) -> None:
    """Wake the scheduler and wait until it has looked at the (moved) clock."""
    async with scheduler.ticked:
        seen = scheduler.ticks
        scheduler.wake()
        await asyncio.wait_for(scheduler.ticked.wait_for(lambda: scheduler.ticks > seen), timeout)
