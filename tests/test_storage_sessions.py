"""Sessions, epochs (/new) and the transcript, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import TYPE_CHECKING

import pytest

from bot.storage import SessionRow, Storage, UnknownSession

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


def _text(text: str) -> list[dict[str, object]]:
    return [{"type": "text", "text": text}]


async def test_ensure_session_creates_once_and_keeps_first_sighting(
    storage: Storage, clock: FakeClock
) -> None:
    first = await storage.ensure_session("main", "main", "telegram", "42")
    assert first == SessionRow(
        key="main",
        scope="main",
        epoch=0,
        model_override=None,
        created_at=clock.now,
        updated_at=clock.now,
        platform="telegram",
        chat_id="42",
    )
    assert first.created_at.tzinfo is UTC
    clock.advance(timedelta(minutes=5))
    # The owner's main session is shared across platforms: a Discord sighting changes nothing.
    again = await storage.ensure_session("main", "main", "discord", "7")
    assert again == first
    assert await storage.get_session("main") == first
    assert await storage.get_session("dm:telegram:9") is None


async def test_set_model_pins_and_clears(storage: Storage, clock: FakeClock) -> None:
    await storage.ensure_session("group:telegram:-100", "sub", "telegram", "-100")
    clock.advance(timedelta(seconds=1))
    pinned = await storage.set_model("group:telegram:-100", "claude-haiku")
    assert pinned.model_override == "claude-haiku"
    assert pinned.updated_at == clock.now
    cleared = await storage.set_model("group:telegram:-100", None)
    assert cleared.model_override is None
    assert (await storage.get_session("group:telegram:-100")) == cleared


async def test_unknown_session_raises_on_update(storage: Storage) -> None:
    with pytest.raises(UnknownSession):
        await storage.new_epoch("nope")
    with pytest.raises(UnknownSession):
        await storage.set_model("nope", "m")


async def test_transcript_roundtrips_blocks_in_insertion_order(storage: Storage) -> None:
    await storage.ensure_session("main", "main")
    tool_use = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "exec",
        "input": {"cmd": "ls -la", "n": [1, 2]},
    }
    tool_result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "naïve ✓ 日本語",
        "is_error": False,
    }
    messages = [
        ("user", _text("hello")),
        ("assistant", [{"type": "text", "text": "let me look"}, tool_use]),
        ("user", [tool_result]),
        ("assistant", _text("done")),
    ]
    for role, content in messages:
        await storage.append_message("main", "run-1", role, content)
    assert await storage.load_transcript("main") == [
        {"role": role, "content": content} for role, content in messages
    ]
    rows = await storage.transcript_rows("main")
    assert [r.id for r in rows] == sorted(r.id for r in rows)
    assert {r.run_id for r in rows} == {"run-1"}


async def test_transcripts_of_sessions_are_separate(storage: Storage) -> None:
    await storage.append_message("main", None, "user", _text("private"))
    await storage.append_message("group:discord:5", None, "user", _text("public"))
    assert await storage.load_transcript("group:discord:5") == [
        {"role": "user", "content": _text("public")}
    ]
    assert await storage.load_transcript("main") == [{"role": "user", "content": _text("private")}]


async def test_new_epoch_hides_old_messages_but_keeps_them(storage: Storage) -> None:
    await storage.ensure_session("main", "main")
    await storage.append_message("main", "r1", "user", _text("old question"))
    await storage.append_message("main", "r1", "assistant", _text("old answer"))

    session = await storage.new_epoch("main")
    assert session.epoch == 1
    assert await storage.load_transcript("main") == []

    await storage.append_message("main", "r2", "user", _text("fresh"))
    assert await storage.load_transcript("main") == [{"role": "user", "content": _text("fresh")}]
    old = await storage.transcript_rows("main", epoch=0)
    assert [r.content for r in old] == [_text("old question"), _text("old answer")]
    assert [r.epoch for r in await storage.transcript_rows("main")] == [1]

    assert (await storage.new_epoch("main")).epoch == 2
    assert await storage.load_transcript("main") == []


async def test_transcript_without_session_row_uses_epoch_zero(storage: Storage) -> None:
    # The core may persist before the router registered the session.
    await storage.append_message("dm:telegram:5", None, "user", _text("hi"))
    assert len(await storage.load_transcript("dm:telegram:5")) == 1
    await storage.ensure_session("dm:telegram:5", "sub", "telegram", "5")
    assert len(await storage.load_transcript("dm:telegram:5")) == 1


async def test_transcript_with_nul_and_lone_surrogates_is_stored_cleanly(storage: Storage) -> None:
    """PostgreSQL refuses NUL in text and JSON; a lone surrogate poisons every later request."""
    await storage.append_message("main", "r1", "user", [{"type": "text", "text": "half \ud83d, nul \x00"}])
    await storage.append_message(
        "main", "r1", "assistant",
        [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path\x00": "a\udc00"}}],
    )
    assert await storage.load_transcript("main") == [
        {"role": "user", "content": [{"type": "text", "text": "half \ufffd, nul \u2400"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path\u2400": "a\ufffd"}}
        ]},
    ]
