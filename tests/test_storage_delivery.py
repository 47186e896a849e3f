"""Inbound update de-dup and outbound deliveries, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.storage import DeliveryRow, Storage

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


async def test_update_seen_only_once_per_platform(storage: Storage) -> None:
    assert await storage.mark_update_seen("telegram", "1001") is True
    assert await storage.mark_update_seen("telegram", "1001") is False
    assert await storage.mark_update_seen("discord", "1001") is True
    assert await storage.mark_update_seen("telegram", "1002") is True


async def test_concurrent_duplicate_updates_exactly_one_is_new(storage: Storage) -> None:
    results = await asyncio.gather(*(storage.mark_update_seen("telegram", "77") for _ in range(10)))
    assert results.count(True) == 1


async def test_prune_seen_updates_forgets_old_ones(storage: Storage, clock: FakeClock) -> None:
    await storage.mark_update_seen("telegram", "old")
    clock.advance(timedelta(days=6))
    await storage.mark_update_seen("telegram", "recent")
    clock.advance(timedelta(days=1, seconds=1))
    assert await storage.prune_seen_updates() == 1
    assert await storage.mark_update_seen("telegram", "old") is True
    assert await storage.mark_update_seen("telegram", "recent") is False
    clock.advance(timedelta(seconds=1))
    assert await storage.prune_seen_updates(timedelta(0)) == 2


async def test_record_delivery_upserts_by_run_and_part(storage: Storage, clock: FakeClock) -> None:
    first = await storage.record_delivery(
        "r1", 0, platform="telegram", chat_id="42", text="Hel", state="streaming", message_id="500"
    )
    assert first == DeliveryRow(
        "r1", 0, "telegram", "42", None, "500", "Hel", "streaming", clock.now
    )
    clock.advance(timedelta(seconds=1))
    updated = await storage.record_delivery(
        "r1",
        0,
        platform="telegram",
        chat_id="42",
        text="Hello world",
        state="final",
        message_id="500",
    )
    assert (updated.text, updated.state, updated.updated_at) == ("Hello world", "final", clock.now)
    await storage.record_delivery(
        "r1",
        1,
        platform="telegram",
        chat_id="42",
        text="part two",
        state="streaming",
        message_id="501",
        thread_id="9",
    )
    await storage.record_delivery(
        "r2", 0, platform="discord", chat_id="7", text="x", state="failed"
    )

    parts = await storage.deliveries_for_run("r1")
    assert [(d.part_index, d.text, d.state, d.thread_id) for d in parts] == [
        (0, "Hello world", "final", None),
        (1, "part two", "streaming", "9"),
    ]
    assert [(d.run_id, d.part_index) for d in await storage.unfinished_deliveries()] == [("r1", 1)]
    assert await storage.deliveries_for_run("none") == []
