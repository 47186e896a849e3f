"""The hot path's statements run straight on sqlite3 (bot.storage.prepared): what a body reads
and writes, and the errors it sees, are the ones `Connection.execute` gives — only cheaper."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, create_engine, event, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from agent_core.events import Usage
from bot.storage import Storage
from bot.storage.inbox import InboxMessage
from bot.storage.models import Base, InboxModel, NoticeSentModel, RunModel
from bot.storage.prepared import PreparedConnection
from bot.storage.writer import SqliteRunner

AT = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)
_INBOX = InboxModel.__table__
_INSERT_INBOX = insert(InboxModel)
_MARK = update(InboxModel).where(InboxModel.id == bindparam("p_id")).values(state=bindparam("p_state"))
_SELECT_INBOX = select(*_INBOX.columns).where(InboxModel.chat_id == bindparam("chat")).order_by(InboxModel.id)
_INSERT_NOTICE = insert(NoticeSentModel)


def _row(chat: str, *, media: Any = None, mentioned: bool = True) -> dict[str, Any]:
    return {
        "platform": "telegram", "chat_kind": "group", "chat_id": chat, "thread_id": None, "sender_id": "7",
        "sender_name": "Ann", "text": "héllo\n", "mentioned": mentioned, "message_id": None, "update_id": None,
        "media": media, "state": "received", "received_at": AT, "updated_at": AT,
    }  # fmt: skip


def _raw(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as raw:
        return raw.execute("SELECT * FROM inbox ORDER BY id").fetchall()


def _writes(conn: Connection | PreparedConnection, chat: str) -> list[Any]:
    """The same statements twice (the second time is the prepared one); what each returned."""
    out: list[Any] = []
    for media in (None, {"attachments": [{"kind": "photo"}], "album_id": "a1"}):
        result = conn.execute(_INSERT_INBOX, _row(chat, media=media, mentioned=media is None))
        out.append((tuple(result.inserted_primary_key), result.rowcount))
    ids = [key[0][0] for key in out]
    out.append(conn.execute(_MARK, [{"p_id": i, "p_state": "queued"} for i in ids]).rowcount)  # executemany
    out.append(conn.execute(_MARK, {"p_id": ids[0], "p_state": "running"}).rowcount)
    out.append(conn.execute(_MARK, {"p_id": 10_000, "p_state": "running"}).rowcount)  # matches nothing
    return out


def test_writes_and_reads_are_the_ones_sqlalchemy_makes(tmp_path: Path) -> None:
    """Same statements, one database through Connection.execute and one through the prepared
    path: the same rows stored byte for byte, the same ids, counts, rows, keys and types back."""
    results = {}
    for name in ("plain", "prepared"):
        path = tmp_path / f"{name}.db"
        engine = create_engine(f"sqlite:///{path}")
        Base.metadata.create_all(engine)
        with engine.begin() as conn:
            runner: Any = conn
            if name == "prepared":
                runner = PreparedConnection(conn)
                runner.begin_batch()  # as SqliteRunner does before each batch of bodies
            writes = _writes(runner, "-1") + _writes(runner, "-2")
            selects = [runner.execute(_SELECT_INBOX, {"chat": chat}) for chat in ("-2", "-2", "-3")]
            rows = [result.all() for result in selects[:2]]
            reads = {
                "rows": [[tuple(r) for r in batch] for batch in rows],
                "attributes": [(r.id, r.media, r.received_at, r.mentioned) for r in rows[1]],
                "by_column": [r._mapping[_INBOX.c.received_at] for r in rows[1]],
                "keys": list(rows[1][0]._mapping.keys()),
                "empty": selects[2].first(),
                "scalar": runner.execute(_SELECT_INBOX, {"chat": "-1"}).scalar(),
                "scalars": runner.execute(_SELECT_INBOX, {"chat": "-1"}).scalars().all(),
            }
            if name == "prepared":
                assert runner._prepared, "the prepared path was taken"
        engine.dispose()
        results[name] = (writes, reads, _raw(path))

    assert results["prepared"] == results["plain"]
    writes, reads, stored = results["prepared"]
    assert writes[0][0] == (1,) and writes[1][0] == (2,)
    assert reads["attributes"][0][2] == AT and reads["attributes"][0][3] is True  # typed, timezone-aware
    assert reads["attributes"][1][1] == {"attachments": [{"kind": "photo"}], "album_id": "a1"}


async def _storage(tmp_path: Path) -> Storage:
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    assert isinstance(storage._runner, SqliteRunner)
    return storage


async def test_a_constraint_violation_is_sqlalchemys_integrity_error_and_loses_only_its_body(
    tmp_path: Path,
) -> None:
    storage = await _storage(tmp_path)
    try:
        def note(ref: str) -> Any:
            def body(conn: Connection) -> str:
                conn.execute(_INSERT_NOTICE, {"kind": "test", "ref": ref, "sent_at": AT})
                return ref
            return body

        assert await storage._transact(note("a")) == "a"
        async with storage._serial:  # queued together: one batch, each body in its savepoint
            calls = [asyncio.create_task(storage._transact(note(ref))) for ref in ("b", "a", "c")]
            await asyncio.sleep(0)
        results = await asyncio.gather(*calls, return_exceptions=True)

        assert results[0] == "b" and results[2] == "c"
        assert isinstance(results[1], IntegrityError)
        assert isinstance(results[1].orig, sqlite3.IntegrityError)
        assert await storage.claim_notice("test", "b") is False  # stored
        assert await storage.claim_notice("test", "d") is True
    finally:
        await storage.aclose()


async def test_a_naive_datetime_is_refused_as_a_value_error_and_nothing_is_written(tmp_path: Path) -> None:
    storage = await _storage(tmp_path)
    try:
        ok = InboxMessage("telegram", "private", "1", "1", "Ann", "hi", AT)
        first = await storage.receive_inbound(ok)
        second = await storage.receive_inbound(ok)  # the statement is prepared from now on
        with pytest.raises(ValueError, match="naive datetime"):
            await storage.receive_inbound(InboxMessage("telegram", "private", "1", "1", "Ann", "hi", datetime(2026, 3, 1)))
        assert second == first + 1
        assert [row.id for row in await storage.inbox_rows()] == [first, second]
    finally:
        await storage.aclose()


async def test_a_tracing_listener_sees_every_statement_of_the_hot_path(tmp_path: Path) -> None:
    storage = await _storage(tmp_path)
    try:
        await storage.begin_run("r0", "main", "m", [{"type": "text", "text": "warm"}])
        seen: list[str] = []
        event.listen(
            storage._runner.sync_engine, "before_cursor_execute",
            lambda conn, cursor, statement, *rest: seen.append(statement.split()[0]),
        )  # fmt: skip
        for n in (1, 2):
            await storage.begin_run(f"r{n}", "main", "m", [{"type": "text", "text": "hi"}])
            await storage.finish_run(f"r{n}", "completed", "end_turn", 1, Usage(1, 1), session_key="main",
                                     last_message=[{"type": "text", "text": "ok"}])  # fmt: skip
        assert seen.count("INSERT") == 6 and seen.count("SELECT") == 2 and seen.count("UPDATE") == 2
    finally:
        await storage.aclose()


async def test_run_rows_read_back_as_stored(tmp_path: Path) -> None:
    """The prepared SELECT of a run (what metrics join) gives the stored, typed values."""
    storage = await _storage(tmp_path)
    try:
        for n in range(3):
            await storage.begin_run(f"r{n}", "main", "model-x", [{"type": "text", "text": f"q{n}"}])
            await storage.finish_run(f"r{n}", "completed", "end_turn", 2, Usage(10 + n, 3), session_key="main",
                                     last_message=[{"type": "text", "text": f"a{n}"}])  # fmt: skip
        history = await storage.begin_run("r9", "main", "model-x", [{"type": "text", "text": "last"}])
        assert [m["content"][0]["text"] for m in history] == ["q0", "a0", "q1", "a1", "q2", "a2"]
        rows = await storage._transact(
            lambda conn: conn.execute(select(RunModel.id, RunModel.input_tokens, RunModel.started_at)).all()
        )
        assert [(r.id, r.input_tokens) for r in rows] == [("r0", 10), ("r1", 11), ("r2", 12), ("r9", 0)]
        assert all(r.started_at.tzinfo is UTC for r in rows)
    finally:
        await storage.aclose()
