"""The inbox: a message marked seen is stored; after a crash each accepted, unanswered
message is handed to its lane once, in order — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.storage import Storage
from bot.storage.inbox import InboxMessage

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


def message(clock: FakeClock, text: str, update_id: str | None = None) -> InboxMessage:
    return InboxMessage("telegram", "private", "1", "1", "Olivia", text, clock(), update_id=update_id)


async def test_an_update_marked_seen_always_has_its_message_stored(storage: Storage, clock: FakeClock) -> None:
    first = await storage.receive_inbound(message(clock, "hello", update_id="500"))
    assert first is not None
    assert await storage.receive_inbound(message(clock, "hello", update_id="500")) is None  # redelivery
    assert await storage.mark_update_seen("telegram", "500") is False
    rows = await storage.inbox_rows()
    assert [(r.id, r.state, r.message.text) for r in rows] == [(first, "received", "hello")]


async def test_concurrent_redeliveries_store_the_message_once(storage: Storage, clock: FakeClock) -> None:
    results = await asyncio.gather(*(storage.receive_inbound(message(clock, "x", update_id="9")) for _ in range(8)))
    assert sum(r is not None for r in results) == 1
    assert len(await storage.inbox_rows()) == 1


async def test_crash_before_the_run_stored_the_message_requeues_it(storage: Storage, clock: FakeClock) -> None:
    ids = [await storage.receive_inbound(message(clock, f"m{i}")) for i in range(3)]
    assert all(i is not None for i in ids)
    for i in ids:
        await storage.queue_inbound(i, "main")  # type: ignore[arg-type]
    await storage.start_run("r1", "main", "m")  # started, but died before appending the user message
    await storage.take_inbound(ids[:2], "r1")  # type: ignore[arg-type]
    pending = await storage.recover_inbox({"telegram"})
    assert [(r.message.text, r.state, r.run_id) for r in pending] == [
        ("m0", "queued", None),
        ("m1", "queued", None),
        ("m2", "queued", None),
    ]


async def test_crash_after_the_run_stored_the_message_never_answers_it_twice(
    storage: Storage, clock: FakeClock
) -> None:
    ids = [await storage.receive_inbound(message(clock, f"m{i}")) for i in range(3)]
    for i in ids:
        await storage.queue_inbound(i, "main")  # type: ignore[arg-type]
    await storage.ensure_session("main", "main")
    await storage.start_run("r1", "main", "m")
    await storage.take_inbound(ids[:2], "r1")  # type: ignore[arg-type]
    await storage.append_message("main", "r1", "user", [{"type": "text", "text": "m0"}, {"type": "text", "text": "m1"}])
    pending = await storage.recover_inbox({"telegram"})
    assert [r.message.text for r in pending] == ["m2"]  # m0, m1: the interrupted run has them
    assert [r.message.text for r in await storage.inbox_rows({"done"})] == ["m0", "m1"]


async def test_recovery_leaves_other_platforms_alone_and_prunes_old_answers(
    storage: Storage, clock: FakeClock
) -> None:
    done = await storage.receive_inbound(message(clock, "answered"))
    await storage.finish_inbound([done])  # type: ignore[list-item]
    console = await storage.receive_inbound(InboxMessage("console", "private", "c", "owner", "you", "typed", clock()))
    await storage.queue_inbound(console, "main")  # type: ignore[arg-type]
    clock.advance(timedelta(days=2))
    assert await storage.recover_inbox({"telegram"}) == []
    assert [r.message.text for r in await storage.inbox_rows()] == ["typed"]
