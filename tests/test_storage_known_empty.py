"""Reads skipped for sessions known to have no compaction / no buffered group message (one
transaction less per message each) must never hide a row written afterwards."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_core.compaction import CompactionRecord
from bot.storage import Storage
from bot.storage.base import KnownEmpty

pytest_plugins = ["tests.storage_fixtures"]

_AT = datetime(2026, 1, 1, tzinfo=UTC)


async def test_group_message_buffered_after_an_empty_read_is_seen(storage: Storage) -> None:
    assert await storage.recent_group_messages("group:telegram:-1") == []
    assert await storage.recent_group_messages("group:telegram:-1") == []  # served from memory
    await storage.add_group_message("group:telegram:-1", "ann", "lunch at noon?", _AT)
    assert [m.text for m in await storage.recent_group_messages("group:telegram:-1")] == ["lunch at noon?"]
    assert await storage.clear_group_messages("group:telegram:-1") == 1
    assert await storage.recent_group_messages("group:telegram:-1") == []


async def test_compaction_saved_after_an_empty_read_is_seen(storage: Storage) -> None:
    assert await storage.compaction_state("main") == (None, None)
    assert await storage.compaction_state("main") == (None, None)
    assert await storage.compaction_state("main") == (None, None)  # served from memory on SQLite
    await storage.save_compaction(CompactionRecord("main", 0, "", 10, 10, False, "timed out"))
    latest, attempt = await storage.compaction_state("main")
    assert latest is None and attempt is not None and attempt.error == "timed out"


async def test_write_landing_during_an_empty_read_is_not_hidden(storage: Storage) -> None:
    """Without a lock (PostgreSQL) a write can commit between a read finding nothing and the
    read recording that: the stale 'empty' must be dropped, not cached."""
    ticket = storage._no_group_messages.ticket()  # the read begins and finds nothing …
    await storage.add_group_message("group:telegram:-2", "bo", "meeting moved", _AT)  # … a write lands …
    storage._no_group_messages.mark("group:telegram:-2", ticket)  # … then the read records 'empty'
    assert [m.text for m in await storage.recent_group_messages("group:telegram:-2")] == ["meeting moved"]


def test_known_empty_keeps_only_the_newest_keys() -> None:
    known = KnownEmpty(capacity=2)
    for key in ("a", "b", "c"):
        known.mark(key, known.ticket())
    assert "a" not in known and "b" in known and "c" in known



async def test_another_process_writing_is_never_hidden(db_url: str) -> None:
    """Two Storage objects on one database stand for two serving processes sharing
    PostgreSQL (scale-out): an "empty" one read earlier must never hide what the other wrote
    since. (On SQLite one serving process writes these rows, so the cache is on there.)"""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite has one serving process by design; the known-empty cache is on there")
    first = await Storage.open(db_url)
    second = await Storage.open(db_url, migrate=False)
    try:
        assert await first.compaction_state("main") == (None, None)
        await second.save_compaction(CompactionRecord("main", 0, "", 10, 10, False, "timed out"))
        latest, attempt = await first.compaction_state("main")
        assert attempt is not None and attempt.error == "timed out"
        assert await first.recent_group_messages("group:telegram:-3") == []
        await second.add_group_message("group:telegram:-3", "ann", "from the other process", _AT)
        assert [m.text for m in await first.recent_group_messages("group:telegram:-3")] == [
            "from the other process"
        ]
    finally:
        await second.aclose()
        await first.aclose()
