"""The audit trail: rows on SQLite and PostgreSQL, secrets redacted whatever the input, and
tool calls and access decisions recorded through the real app (PTB ↔ fake Bot API, SDK ↔
fake Messages API)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core.ports import AuditEntry
from bot.logs import RedactSecrets
from bot.storage import Storage
from tests.app_harness import running_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.recording_adapter import private
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import BOT_USERNAME, GROUP, MEMBER, OWNER, STRANGER, TOKEN, running, tg  # noqa: F401

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

pytest_plugins = ["tests.storage_fixtures"]

SECRET = "sk-live-SECRET-value-0123456789"
UNTOLD_BOT_TOKEN = "987654321:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawZ"
UNTOLD_API_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"


def dump(rows: list) -> str:  # type: ignore[type-arg]
    return json.dumps([repr(r) for r in rows])


async def test_audit_rows_never_hold_a_secret_in_any_field(storage: Storage) -> None:
    storage.use_redactor(RedactSecrets([SECRET]).redact)
    await storage.audit(
        AuditEntry(
            kind="tool_call",
            actor=f"telegram:{SECRET}",
            session_key=f"dm:{SECRET}",
            subject=f"exec {SECRET}",
            detail=json.dumps({"command": f"curl -H 'Authorization: {SECRET}' {UNTOLD_API_KEY}",
                               "url": f"https://api.telegram.org/bot{UNTOLD_BOT_TOKEN}/getMe"}),
            decision=SECRET[:20],
            approver=SECRET,
            status=SECRET,
            size=10,
            duration_s=0.5,
        )
    )
    rows = await storage.audit_entries(limit=None)
    assert len(rows) == 1
    text = dump(rows)
    for secret in (SECRET, UNTOLD_BOT_TOKEN, UNTOLD_API_KEY):
        assert secret not in text
    assert "[REDACTED]" in rows[0].detail and rows[0].size == 10


async def test_a_secret_cut_by_the_length_cap_is_still_redacted(storage: Storage) -> None:
    storage.use_redactor(RedactSecrets([SECRET]).redact)
    padding = "x" * 3990
    await storage.audit(AuditEntry(kind="tool_call", actor="telegram:1", detail=padding + SECRET))
    (row,) = await storage.audit_entries()
    assert SECRET[:8] not in row.detail and len(row.detail) <= 4000


async def test_audit_query_filters_by_session_and_time_and_keeps_the_newest(
    storage: Storage, clock: FakeClock
) -> None:
    for i in range(30):
        await storage.audit(
            AuditEntry(kind="access", actor="telegram:1", session_key="main" if i % 2 else "group:telegram:-1", subject=f"n{i}")
        )
        clock.advance(timedelta(minutes=1))
    last = await storage.audit_entries(limit=20)
    assert [r.subject for r in last] == [f"n{i}" for i in range(10, 30)]  # the newest 20, oldest first
    main = await storage.audit_entries(session_key="main", limit=None)
    assert [r.subject for r in main] == [f"n{i}" for i in range(1, 30, 2)]
    recent = await storage.audit_entries(since=clock.now - timedelta(minutes=5), limit=None)
    assert [r.subject for r in recent] == ["n25", "n26", "n27", "n28", "n29"]


async def test_a_failed_audit_write_never_raises_and_is_logged(storage: Storage, caplog: pytest.LogCaptureFixture) -> None:
    """`Storage.audit`'s promise: a failed write never raises and is logged (with its kind);
    a cancellation still propagates."""
    await storage.aclose()
    with caplog.at_level(logging.ERROR, logger="bot.storage.audit"):
        await storage.audit(AuditEntry(kind="access", actor="telegram:1"))  # the database is gone
    (record,) = [r for r in caplog.records if r.getMessage() == "audit.write_failed"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert getattr(record, "kind", None) == "access"


async def test_a_cancelled_audit_write_is_cancelled_not_swallowed(tmp_path) -> None:  # noqa: ANN001
    # On SQLite only: there writes queue on one lock, so a write can be held where a cancel
    # reaches it (PostgreSQL transactions do not queue on a lock of Roost's).
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    try:
        await _cancelled_write(storage)
    finally:
        await storage.aclose()


async def _cancelled_write(storage: Storage) -> None:
    serial = storage._serial  # noqa: SLF001  (held, so the write waits where a cancel can reach it)
    assert serial is not None
    async with serial:
        write = asyncio.create_task(storage.audit(AuditEntry(kind="access", actor="telegram:1")))
        await asyncio.sleep(0)  # timing-ok: one loop turn, so the write reaches the lock
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
    assert await storage.audit_entries(limit=None) == []


# --- through the real app ----------------------------------------------------------------


async def test_a_secret_in_a_tool_input_never_reaches_the_audit_trail(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(
            ToolUse("read_file", {"path": f"notes/{TOKEN}.md"}),
            ToolUse("list_dir", {"path": f"test-key/{UNTOLD_BOT_TOKEN}"}),
        ),
        reply_text("Nothing there."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "read my notes")
        await h.bot_text(OWNER, lambda t: "Nothing there." in t)
        rows = await h.app.storage.audit_entries(limit=None)
    calls = [r for r in rows if r.kind == "tool_call"]
    assert {r.subject for r in calls} >= {"read_file", "list_dir"}, rows
    assert all(r.actor == f"telegram:{OWNER}" and r.session_key == "main" for r in calls)
    text = dump(rows)
    for secret in (TOKEN, "test-key", UNTOLD_BOT_TOKEN):
        assert secret not in text


async def test_access_decisions_are_audited(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    closed_group = -100777
    async with running(tmp_path, tg, fake_api, paced=False, telegram={"allowed_groups": [str(GROUP)]}) as h:
        tg.send_private(STRANGER, "let me in", first_name="Sam")
        await h.bot_text(STRANGER, lambda t: "pairing code" in t)
        tg.send_group(closed_group, MEMBER, "hello?", mention=True, first_name="Bob")
        tg.send_group(closed_group, MEMBER, "chatter nobody addressed to me", first_name="Bob")
        tg.send_private(OWNER, f"/allow telegram:{MEMBER}")
        await h.bot_text(OWNER, lambda t: t == f"telegram:{MEMBER} may now talk to me privately.")
        tg.send_private(OWNER, f"/revoke telegram:{MEMBER}")
        await h.bot_text(OWNER, lambda t: t.startswith(f"telegram:{MEMBER} can no longer talk to me"))
        tg.send_private(OWNER, f"/revoke group telegram:{GROUP}")
        await h.bot_text(OWNER, lambda t: "allowed by the configuration" in t)
        tg.send_group(GROUP, MEMBER, f"/allow@{BOT_USERNAME}", first_name="Bob")
        await h.bot_text(GROUP, lambda t: t == "Only my owner can change where I answer.")
        rows = await h.app.storage.audit_entries(limit=None)
    seen = [(r.kind, r.actor, r.subject, r.decision) for r in rows]
    assert ("pairing", f"telegram:{STRANGER}", "private chat", "pairing requested") in seen
    assert ("access", f"telegram:{MEMBER}", "group", "denied") in seen
    assert ("access", f"telegram:{OWNER}", f"telegram:{MEMBER}", "allowed") in seen
    assert ("access", f"telegram:{OWNER}", f"telegram:{MEMBER}", "revoked") in seen
    assert ("access", f"telegram:{OWNER}", f"group telegram:{GROUP}", "refused") in seen
    assert ("command", f"telegram:{MEMBER}", f"/allow group telegram:{GROUP}", "denied") in seen
    # Unaddressed chatter in a group the bot does not serve is not an access decision.
    assert sum(1 for r in rows if r.kind == "access" and r.decision == "denied") == 1


async def test_audit_in_the_owners_chat_shows_the_last_20_and_nobody_else_may_ask(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        for i in range(25):
            await h.app.storage.audit(AuditEntry(kind="access", actor="cli", subject=f"entry-{i:02d}", decision="allowed"))
        await h.app.storage.pair_user("telegram", str(STRANGER))
        tg.send_private(STRANGER, "/audit", first_name="Sam")
        await h.says(STRANGER, "Only my owner can use /audit.")
        tg.send_group(GROUP, OWNER, f"/audit@{BOT_USERNAME}", first_name="Olivia")
        await h.says(GROUP, "Use /audit in our private chat.")
        tg.send_private(OWNER, "/audit")
        shown = await h.bot_text(OWNER, lambda t: t.startswith("Last audit entries"))
    lines = (shown.text or "").splitlines()[1:]
    assert len(lines) == 20
    assert "entry-05" in lines[0] and "entry-24" in lines[-1]  # the newest 20, oldest first
    assert "entry-04" not in (shown.text or "")


async def test_a_flooding_stranger_adds_one_audit_row_not_one_per_message(tmp_path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        for i in range(20):
            await adapter.say(private(666, f"let me in {i}"))
        rows = await app.storage.audit_entries(limit=None)
    assert [(r.kind, r.actor, r.decision) for r in rows] == [("pairing", "telegram:666", "pairing requested")]
    assert not fake_api.requests
