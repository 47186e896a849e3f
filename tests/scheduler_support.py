"""Shared by the scheduler tests: a settable clock and waiting for a scheduler tick."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pathlib import Path

from bot.app import build
from bot.scheduling.scheduler import Scheduler
from tests.telegram_harness import FAST_INTERVAL_S, Harness, adapter_for, telegram_settings


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


async def make_job(h: Any, clock: FakeClock, chat: int, ack: str, **args: object) -> Any:
    """The owner asks; the fake model calls `schedule`; returns the job row."""
    from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools

    h.app.scheduler.clock = clock
    before = {j.id for j in await h.app.storage.list_jobs(include_ended=True)}
    h.llm.script(reply_tools(ToolUse("schedule", {"action": "create", **args})), reply_text(ack))
    h.tg.send_private(chat, "schedule it")
    await h.says(chat, ack)
    (job,) = [j for j in await h.app.storage.list_jobs(include_ended=True) if j.id not in before]
    return job


@contextlib.asynccontextmanager
async def running_at(
    tmp_path: Path, tg: Any, llm: Any, clock: FakeClock, *, prepare: Callable[[Any], None] | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """`tests.telegram_harness.running` (unpaced) with the scheduler on `clock` from its very
    first tick — a restart test must not let the real clock decide what was missed.
    `prepare(app)` runs before anything is resumed (e.g. to inject the re-sends' sleep)."""
    settings = telegram_settings(tmp_path, tg, llm, **overrides)
    adapter = adapter_for(settings, private_interval_s=FAST_INTERVAL_S, group_interval_s=FAST_INTERVAL_S)
    async with build(settings, [adapter]) as app:
        assert app.scheduler is not None
        app.scheduler.clock = clock
        if prepare is not None:
            prepare(app)
        await app.conversations.load_inbox()
        await adapter.start(app.conversations)
        try:
            await app.conversations.recover_deliveries()
            await app.conversations.replay_inbox()
            yield Harness(app, adapter, tg, llm)
        finally:
            try:
                await app.conversations.aclose()
            finally:
                await adapter.aclose()


async def no_wait(seconds: float) -> None:
    """A re-send's sleep that returns at once (the backoff is asserted elsewhere)."""


class Parked:
    """A re-send's sleep that never returns: the send stays pending; `parked` is set once
    something waits (so a test can stop the app right then, before any re-send)."""

    def __init__(self, *, after: int = 0) -> None:
        self.parked = asyncio.Event()
        self.waits: list[float] = []
        self._free = after
        """Waits that return at once before one parks."""

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self._free > 0:
            self._free -= 1
            return
        self.parked.set()
        await asyncio.Event().wait()

    async def wait(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.parked.wait(), timeout)


def sleeping(sleep: Callable[[float], Awaitable[None]]) -> Callable[[Any], None]:
    """A `running_at(prepare=...)` that gives the app's pending sends `sleep`."""

    def prepare(app: Any) -> None:
        app.conversations.jobs.sends.sleep = sleep

    return prepare
