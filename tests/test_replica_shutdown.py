"""A replica stops when told to, whatever its sweep is doing at that moment.

CI hung for 120 s in a replica test's teardown: `Replicas.stop` cancelled the sweep just as
another replica's "I let my sessions go" woke it, and on Python 3.11 `asyncio.wait_for`
swallows a cancel that meets its inner wait's completion, so the sweep went on and `stop`
waited for it for ever (a rolling restart's SIGTERM would have hung the same way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.replica_support import until, webhook_replicas
from tests.storage_fixtures import fresh_postgres_database
from tests.telegram_harness import tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py


async def test_a_replica_stopped_just_as_its_sweep_is_woken_still_stops(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, 1) as [(a, _)]:
        replicas = a.app.conversations.replicas
        assert replicas is not None
        await until(lambda: replicas.sweeps >= 1)  # waiting for its period (or a wake) now
        replicas.wake()  # another replica let its sessions go, just as this one stops
        stopping = asyncio.create_task(replicas.stop())
        done, _ = await asyncio.wait({stopping}, timeout=10)
        assert done, "the replica did not stop within 10 s"
