"""Pairing, runtime-allowed groups and the group context buffer, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from bot.storage import (
    GROUP_BUFFER_SIZE,
    MAX_PENDING_PAIRINGS,
    PairedUser,
    PairingCodeInUse,
    Storage,
)

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]

HOUR = timedelta(hours=1)


async def test_pairing_limit_is_three_live_requests_per_platform(
    storage: Storage, clock: FakeClock
) -> None:
    assert MAX_PENDING_PAIRINGS == 3
    expires = clock.now + HOUR
    for i in range(3):
        created = await storage.create_pairing(
            "telegram", f"u{i}", f"User {i}", f"CODE{i}", expires
        )
        assert created is not None and created.code == f"CODE{i}"
        clock.advance(timedelta(seconds=1))
    assert await storage.create_pairing("telegram", "u3", "User 3", "CODE3", expires) is None
    # Other platforms have their own slots.
    assert await storage.create_pairing("discord", "u3", "User 3", "CODE3", expires) is not None
    # Asking again returns the live request (same code) and burns no slot.
    again = await storage.create_pairing("telegram", "u0", "User 0", "OTHER", expires)
    assert again is not None and again.code == "CODE0"
    assert [p.code for p in await storage.list_pending_pairings()] == [
        "CODE0",
        "CODE1",
        "CODE2",
        "CODE3",
    ]


async def test_expired_requests_free_their_slots(storage: Storage, clock: FakeClock) -> None:
    for i in range(3):
        await storage.create_pairing("telegram", f"u{i}", "n", f"C{i}", clock.now + HOUR)
    clock.advance(HOUR)
    assert await storage.find_pairing("telegram", "C0") is None
    assert await storage.list_pending_pairings() == []
    fresh = await storage.create_pairing("telegram", "u9", "n", "C0", clock.now + HOUR)
    assert fresh is not None and fresh.code == "C0"  # the expired code is reusable too
    assert await storage.find_pairing("telegram", "C0") == fresh


async def test_concurrent_requests_never_exceed_the_limit(
    storage: Storage, clock: FakeClock
) -> None:
    results = await asyncio.gather(
        *(
            storage.create_pairing("telegram", f"u{i}", "n", f"K{i}", clock.now + HOUR)
            for i in range(8)
        )
    )
    assert sum(r is not None for r in results) == 3
    assert len(await storage.list_pending_pairings()) == 3


async def test_code_collision_raises(storage: Storage, clock: FakeClock) -> None:
    await storage.create_pairing("telegram", "u1", "n", "SAME", clock.now + HOUR)
    with pytest.raises(PairingCodeInUse):
        await storage.create_pairing("telegram", "u2", "n", "SAME", clock.now + HOUR)


async def test_approve_pairing_is_one_shot(storage: Storage, clock: FakeClock) -> None:
    await storage.create_pairing("telegram", "u1", "Alice", "ABCD2345", clock.now + HOUR)
    assert await storage.is_paired("telegram", "u1") is False
    paired = await storage.approve_pairing("telegram", "ABCD2345")
    assert paired == PairedUser("telegram", "u1", "Alice", clock.now)
    assert await storage.is_paired("telegram", "u1") is True
    assert await storage.is_paired("discord", "u1") is False
    assert await storage.approve_pairing("telegram", "ABCD2345") is None
    assert await storage.find_pairing("telegram", "ABCD2345") is None
    assert await storage.list_pending_pairings() == []


async def test_expired_or_unknown_code_cannot_be_approved(
    storage: Storage, clock: FakeClock
) -> None:
    await storage.create_pairing("telegram", "u1", "Alice", "LATE", clock.now + HOUR)
    assert await storage.approve_pairing("telegram", "WRONG") is None
    assert await storage.approve_pairing("discord", "LATE") is None
    clock.advance(HOUR)
    assert await storage.approve_pairing("telegram", "LATE") is None
    assert await storage.is_paired("telegram", "u1") is False


async def test_allowed_groups(storage: Storage) -> None:
    assert await storage.allow_group("telegram", "-1001") is True
    assert await storage.allow_group("telegram", "-1001") is False
    await storage.allow_group("telegram", "-1002")
    await storage.allow_group("discord", "-1001")
    assert await storage.is_group_allowed("telegram", "-1001") is True
    assert await storage.is_group_allowed("telegram", "-9") is False
    assert await storage.allowed_groups("telegram") == {"-1001", "-1002"}
    assert await storage.disallow_group("telegram", "-1001") is True
    assert await storage.disallow_group("telegram", "-1001") is False
    assert await storage.allowed_groups("telegram") == {"-1002"}
    assert await storage.allowed_groups("discord") == {"-1001"}


async def test_group_buffer_keeps_the_newest_fifty(storage: Storage, clock: FakeClock) -> None:
    assert GROUP_BUFFER_SIZE == 50
    key = "group:telegram:-1001"
    for i in range(60):
        clock.advance(timedelta(seconds=1))
        await storage.add_group_message(key, f"user{i % 3}", f"msg {i}", clock.now)
    await storage.add_group_message("group:telegram:-2", "bob", "elsewhere", clock.now)

    kept = await storage.recent_group_messages(key)
    assert [m.text for m in kept] == [f"msg {i}" for i in range(10, 60)]  # oldest first
    assert kept[-1].at == clock.now and kept[-1].sender == "user2"
    assert [m.text for m in await storage.recent_group_messages(key, limit=3)] == [
        "msg 57",
        "msg 58",
        "msg 59",
    ]
    assert await storage.clear_group_messages(key) == 50
    assert await storage.recent_group_messages(key) == []
    assert [m.text for m in await storage.recent_group_messages("group:telegram:-2")] == [
        "elsewhere"
    ]
