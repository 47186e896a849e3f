"""Several replicas on one PostgreSQL: one scheduler leader fires each due time exactly once;
when the leader's connection dies (process killed, network lost) another replica takes
over within seconds and the due time is neither lost nor fired twice.

The replicas here are schedulers in one test process, each with its own engine (its own
connections, as separate processes would have); the leader's death is its lock
connection terminated by the server, as a kill -9 ends it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bot.leadership import Leadership
from bot.scheduling.refs import JobRef
from bot.scheduling.scheduler import Scheduler
from bot.storage import Storage
from bot.storage.jobs import NewJob
from tests.scheduler_support import FakeClock, tick
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py


@dataclass
class Lanes:
    """Where a replica's scheduler submits due runs (Conversations.run_job's signature)."""

    name: str
    fired: list[tuple[str, JobRef, float]]
    adapters: dict[str, Any] = field(default_factory=lambda: {"telegram": object()})
    jobs: Any = None

    async def run_job(self, inbound: Any, session_key: str, inbox_id: int, job: JobRef) -> str | None:
        self.fired.append((self.name, job, time.time()))
        return None


def once_at(due: datetime, job_id: str = "0ce0ce00") -> NewJob:
    return NewJob(
        id=job_id, name="reminder", prompt="stretch", session_key="main", platform="telegram", chat_kind="private",
        chat_id="1", thread_id=None, creator="telegram:1", kind="once", spec=due.isoformat(), timezone="UTC",
        grace_s=60, next_run_at=due, created_at=due - timedelta(minutes=5),
    )


async def replica(url: str, name: str, fired: list[Any], tmp_path: Path, **kwargs: Any) -> Scheduler:
    storage = await Storage.open(url)
    scheduler = Scheduler(storage, timezone="UTC", owners=["telegram:1"], workspace=tmp_path, **kwargs)
    scheduler.attach(Lanes(name, fired))  # type: ignore[arg-type]
    await scheduler.start()
    scheduler.adapters_ready()
    return scheduler


async def stop(scheduler: Scheduler) -> None:
    await scheduler.aclose()
    await scheduler.storage.aclose()


async def kill_lock_connections(url: str) -> int:
    """What a kill -9 does to the leader: the server ends its session, releasing its lock."""
    admin = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
    try:
        rows = await admin.fetch(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = $1",
            make_url(url).database,
        )
        return len(rows)
    finally:
        await admin.close()


async def test_leader_killed_two_seconds_before_a_due_time_the_job_fires_once_on_time(
    dialect: str, tmp_path: Path
) -> None:
    async with fresh_postgres_database() as url:
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
        fired: list[tuple[str, JobRef, float]] = []
        a = await replica(url, "a", fired, tmp_path)
        b = await replica(url, "b", fired, tmp_path)
        try:
            await a.storage.create_job(once_at(due))
            a.wake()
            b.wake()
            assert a.leader.held and not b.leader.held  # one leader; the other waits
            await asyncio.sleep(max(0.0, due.timestamp() - 2 - time.time()))  # timing-ok: the scenario's "2 s before"
            assert await kill_lock_connections(url) == 1
            assert await b.leader.wait_held(timeout=10), "no replica took over within 10 s"
            deadline = time.monotonic() + 15
            while not fired and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # timing-ok: waiting for the due time itself
            assert fired, "the due time was lost"
            # Both replicas look again after the fire: nothing fires a second time.
            await tick(b)
            if a.leader.held:
                await tick(a)
            assert len(fired) == 1, fired
            assert abs(fired[0][2] - due.timestamp()) <= 10, f"fired {fired[0][2] - due.timestamp():+.1f} s from due"
            job = await b.storage.get_job("0ce0ce00")
            assert job is not None and job.state == "done"
        finally:
            await stop(a)
            await stop(b)


class BelievesItLeads(Leadership):
    """A replica that has not yet noticed its lock connection died: it still fires."""

    def __init__(self) -> None:
        self._single = False
        self.held = True
        self.on_change = None
        self.changes = asyncio.Condition()

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_two_replicas_that_both_believe_they_lead_fire_a_due_time_once(dialect: str, tmp_path: Path) -> None:
    async with fresh_postgres_database() as url:
        due = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
        clock = FakeClock(due - timedelta(minutes=1))
        fired: list[tuple[str, JobRef, float]] = []
        a = await replica(url, "a", fired, tmp_path, clock=clock, leader=BelievesItLeads())
        b = await replica(url, "b", fired, tmp_path, clock=clock, leader=BelievesItLeads())
        try:
            await a.storage.create_job(once_at(due))
            clock.advance(minutes=1, seconds=1)
            await asyncio.gather(tick(a), tick(b), a.tick(), b.tick())
            assert len(fired) == 1, fired
            assert len(await a.storage.inbox_rows({"queued"})) == 1
        finally:
            await stop(a)
            await stop(b)


async def test_a_job_made_on_a_replica_that_does_not_lead_fires_on_time(dialect: str, tmp_path: Path) -> None:
    async with fresh_postgres_database() as url:
        fired: list[tuple[str, JobRef, float]] = []
        a = await replica(url, "a", fired, tmp_path)
        b = await replica(url, "b", fired, tmp_path)
        try:
            assert a.leader.held and not b.leader.held
            await tick(a)  # the leader has looked at an empty table: it naps
            due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
            await b.storage.create_job(once_at(due))
            b.wake()  # what the schedule tool does on the replica it ran on: reaches only b
            deadline = time.monotonic() + 20
            while not fired and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # timing-ok: waiting for the due time itself
            assert [f[0] for f in fired] == ["a"]
            assert abs(fired[0][2] - due.timestamp()) <= 10, f"fired {fired[0][2] - due.timestamp():+.1f} s from due"
        finally:
            await stop(a)
            await stop(b)
