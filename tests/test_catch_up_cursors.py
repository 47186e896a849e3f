"""`adapters.catch_up.CursorKeeper`: a cursor only moves forward, saving never blocks a
note, and nothing noted is lost to a failed save or to closing; the stored cursors
(bot.storage.cursors) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from adapters.catch_up import CursorKeeper, Watched
from bot.storage import Storage
from tests.storage_fixtures import clock, db_url, storage  # noqa: F401  (fixtures)


class Store:
    def __init__(self, saved: dict[str, str] | None = None, failures: int = 0) -> None:
        self.saved = dict(saved or {})
        self.failures = failures
        self.writes: list[dict[str, str]] = []
        self.wrote = asyncio.Event()

    async def load(self, platform: str) -> dict[str, str]:
        return dict(self.saved)

    async def save(self, platform: str, cursors: Mapping[str, str]) -> None:
        self.wrote.set()
        if self.failures:
            self.failures -= 1
            raise OSError("database is locked")
        self.writes.append(dict(cursors))
        self.saved.update(cursors)

    async def watched(self, platform: str) -> Watched:
        return Watched()

    async def report_missed(self, platform: str, text: str) -> None:
        pass


async def test_a_cursor_never_moves_back_and_ids_compare_as_numbers() -> None:
    store = Store({"c": "1000"})
    keeper = CursorKeeper("discord", store)
    assert await keeper.load() == {"c": "1000"}
    keeper.note("c", "999")  # older (and shorter: a string comparison would say newer)
    keeper.note("c", "10001")
    keeper.note("c", "5000")
    await keeper.aclose()
    assert store.saved == {"c": "10001"}


async def test_a_failed_save_loses_no_cursor_and_close_saves_the_rest() -> None:
    store = Store(failures=1)
    keeper = CursorKeeper("discord", store)
    await keeper.load()
    keeper.note("a", "10")
    async with asyncio.timeout(5):
        await store.wrote.wait()  # the background save ran and failed
    keeper.note("b", "20")
    await keeper.aclose()
    assert store.saved == {"a": "10", "b": "20"}


async def test_stored_cursors_round_trip_per_platform_and_update_in_place(storage: Storage) -> None:
    await storage.save_channel_cursors("discord", {"1": "100", "2": "200"})
    await storage.save_channel_cursors("discord", {"1": "150"})
    await storage.save_channel_cursors("telegram", {"1": "7"})
    assert await storage.channel_cursors("discord") == {"1": "150", "2": "200"}
    assert await storage.channel_cursors("telegram") == {"1": "7"}
    assert await storage.channel_cursors("console") == {}
