"""Approval cards over the wire: the real `exec` tool waits for a button, only the owner's
press counts, a decision is made once, expiry edits the card, long actions come as a file."""

from __future__ import annotations

from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import StoredMessage
from tests.telegram_harness import OWNER, STRANGER, Harness, running, tg  # noqa: F401  (fixture)


def vars_of(message: StoredMessage) -> dict[str, Any]:
    return {f: getattr(message, f) for f in StoredMessage.__slots__}  # type: ignore[attr-defined]


def buttons(message: StoredMessage) -> dict[str, str]:
    """label → callback_data of the message's inline keyboard."""
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def cards(h: Harness, n: int = 1) -> list[StoredMessage]:
    """The first `n` approval cards shown in the owner's chat (waits for them)."""

    def found() -> list[StoredMessage] | None:
        shown = [m for m in h.tg.bot_messages(OWNER) if (m.text or "").startswith("🔐")]
        return shown[:n] if len(shown) >= n else None

    result = await h.tg.await_for(found)
    assert result is not None
    return result


async def press(h: Harness, card: StoredMessage, label: str, user: int = OWNER, **kwargs: Any) -> dict[str, Any]:
    """Press a card's button; returns the callback answer once given."""
    data = buttons(card).get(label) or kwargs.pop("data")
    kwargs.setdefault("first_name", "Olivia" if user == OWNER else "Mallory")
    query = h.tg.press_button(OWNER, card.message_id, user, data, **kwargs)
    state = await h.tg.await_for(lambda: h.tg.callback_query(query).answered and h.tg.callback_query(query))
    return state.answer or {}


def tool_results(fake_api: FakeAnthropic, request: int) -> list[dict[str, Any]]:
    content = user_blocks(fake_api.requests[request].json)
    return [b for b in content if b["type"] == "tool_result"]


async def test_owner_approves_then_the_tool_runs_and_the_run_continues(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    command = "echo approved >> marker.txt"
    fake_api.script(
        reply_tools(ToolUse("exec", {"command": command}), text="Let me write the marker."),
        reply_text("Done: the marker is written."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "write the marker")
        (card,) = await cards(h)
        assert command in (card.text or "") and any(e["type"] == "pre" for e in card.entities)
        assert set(buttons(card)) == {"✅ Approve once", "♾ Always in this session", "❌ Deny"}
        assert all(len(d.encode()) <= 64 and d.startswith("ap:") for d in buttons(card).values())
        assert not (h.workspace / "marker.txt").exists()  # waits for the button

        answer = await press(h, card, "✅ Approve once")
        assert answer.get("text") == "✅ Approved once."
        await h.bot_text(OWNER, lambda t: "Done: the marker is written." in t)
        assert (h.workspace / "marker.txt").read_text() == "approved\n"
        decided = await h.bot_text(OWNER, lambda t: t.endswith("✅ Approved once by Olivia."))
        assert decided.message_id == card.message_id and decided.reply_markup is None
        assert command in (decided.text or "")
        (result,) = tool_results(fake_api, 1)
        assert not result.get("is_error")


async def test_a_non_owner_press_is_refused_and_changes_nothing(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run it")
        (card,) = await cards(h)
        answer = await press(h, card, "✅ Approve once", user=STRANGER, first_name="Mallory")
        assert answer == {"text": "This approval isn't yours.", "show_alert": True}
        unchanged = tg.message(OWNER, card.message_id)
        assert unchanged.edits == [] and buttons(unchanged) == buttons(card)
        assert not (h.workspace / "marker.txt").exists()
        await press(h, card, "✅ Approve once")  # the owner still can
        await h.bot_text(OWNER, lambda t: t.endswith("by Olivia."))
        await h.bot_text(OWNER, lambda t: t == "ok")  # the card shows the decision before the tool runs
        assert (h.workspace / "marker.txt").read_text() == "ran\n"


async def test_double_tap_executes_once(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run it once")
        (card,) = await cards(h)
        data = buttons(card)
        # Three presses before the card is edited: the same button twice, then another.
        taps = [
            tg.press_button(OWNER, card.message_id, OWNER, data[label], first_name="Olivia")
            for label in ("✅ Approve once", "✅ Approve once", "❌ Deny")
        ]
        await tg.await_for(lambda: all(tg.callback_query(q).answered for q in taps))
        assert tg.callback_query(taps[0]).answer == {"text": "✅ Approved once.", "show_alert": False}
        for late in taps[1:]:
            assert tg.callback_query(late).answer == {
                "text": "Already decided: ✅ Approved once by Olivia.", "show_alert": True
            }
        await h.bot_text(OWNER, lambda t: t.endswith("✅ Approved once by Olivia."))
        await h.bot_text(OWNER, lambda t: t == "ok")
        assert (h.workspace / "marker.txt").read_text() == "ran\n"


async def test_expired_approval_edits_the_card_and_the_tool_gets_a_denial(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo late >> marker.txt"})), reply_text("understood"))
    async with running(tmp_path, tg, fake_api, paced=False, agent={"approval_ttl_s": 2.0}) as h:
        tg.send_private(OWNER, "run it later")
        # 2 s, so the card is sent (with buttons) before it expires even on a loaded machine.
        # It may have expired by the time the test first looks: its live keyboard is in its
        # edit history.
        expired = await h.bot_text(OWNER, lambda t: t.endswith("⌛ Expired — not run."))
        (card,) = await cards(h)
        assert expired.message_id == card.message_id and expired.reply_markup is None
        live = StoredMessage(**{**vars_of(expired), "reply_markup": expired.edits[0].reply_markup})
        await h.bot_text(OWNER, lambda t: t == "understood")
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "expired" in str(result["content"])
        answer = await press(h, live, "", data=buttons(live)["✅ Approve once"], require_button=False)
        assert answer == {"text": "This approval expired — nothing was run.", "show_alert": True}
        assert not (h.workspace / "marker.txt").exists()


async def test_two_approvals_pending_in_one_turn(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    fake_api.script(
        reply_tools(ToolUse("exec", {"command": "echo a > a.txt"}), ToolUse("exec", {"command": "echo b > b.txt"})),
        reply_text("one of two"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "do both")
        first, second = await cards(h, 2)
        by_command = {("a.txt" in (c.text or "")): c for c in (first, second)}
        await press(h, by_command[False], "❌ Deny")  # b first: order of decisions is free
        await press(h, by_command[True], "✅ Approve once")
        await h.bot_text(OWNER, lambda t: t == "one of two")
        assert (h.workspace / "a.txt").exists() and not (h.workspace / "b.txt").exists()
        a_result, b_result = tool_results(fake_api, 1)
        assert not a_result.get("is_error") and b_result.get("is_error")
        denied = await h.bot_text(OWNER, lambda t: t.endswith("❌ Denied by Olivia."))
        assert denied.message_id == by_command[False].message_id


async def test_always_allow_skips_the_card_for_the_rest_of_the_session(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        # A grant covers this exact action (the permissions rework scopes grants to it).
        reply_tools(ToolUse("exec", {"command": "echo 1 >> marker.txt"})),
        reply_tools(ToolUse("exec", {"command": "echo 1 >> marker.txt"})),
        reply_text("both done"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "twice")
        (card,) = await cards(h)
        assert (await press(h, card, "♾ Always in this session")).get("text") == "✅ Always allowed in this session."
        await h.bot_text(OWNER, lambda t: t == "both done")
        assert (h.workspace / "marker.txt").read_text() == "1\n1\n"
        assert len([m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("🔐")]) == 1


async def test_a_long_command_is_attached_as_a_file_never_truncated(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    payload = "x" * 5000
    command = f"printf '%s' {payload} > long.txt"
    fake_api.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("long one done"))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "the long one")
        (card,) = await cards(h)
        documents = [m for m in tg.messages(OWNER) if m.document is not None]
        assert len(documents) == 1 and documents[0].message_id < card.message_id
        document = documents[0].document
        assert document is not None and document.file_name == "action.txt"
        assert document.data.decode() == command  # the whole action
        assert "action.txt" in (card.text or "") and payload not in (card.text or "")
        assert buttons(card)
        await press(h, card, "✅ Approve once")
        await h.bot_text(OWNER, lambda t: t == "long one done")
        assert (h.workspace / "long.txt").read_text() == payload


async def test_stop_while_waiting_cancels_the_card_and_removes_its_buttons(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo never >> marker.txt"})))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run something")
        (card,) = await cards(h)
        tg.send_private(OWNER, "/stop")
        cancelled = await h.bot_text(OWNER, lambda t: t.endswith("⏹ Cancelled — the run was stopped."))
        assert cancelled.message_id == card.message_id and cancelled.reply_markup is None
        answer = await press(h, card, "", data=buttons(card)["✅ Approve once"], require_button=False)
        assert answer.get("show_alert") and "Cancelled" in answer.get("text", "")
        assert not (h.workspace / "marker.txt").exists()


async def test_card_left_live_by_a_dead_process_is_closed_at_the_next_start(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    import asyncio
    import dataclasses

    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo never"})))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run it")
        (card,) = await cards(h)
        storage = h.app.storage
        (pending,) = await storage.pending_approvals()
        async with asyncio.timeout(5):  # the card's place is written right after it is sent
            while (record := await storage.get_approval(pending.id)).chat_ref is None:
                await asyncio.sleep(0.01)
        assert record.chat_ref == f"telegram:{OWNER}::{card.message_id}"
        # What the next start does for approvals the old process left pending:
        await h.adapter.close_expired_card(dataclasses.replace(record, state="expired"))
        closed = await h.bot_text(OWNER, lambda t: "Expired" in t)
        assert closed.message_id == card.message_id and closed.reply_markup is None
        assert "echo never" in (closed.text or "")
