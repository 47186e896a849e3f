"""Approval buttons over the wire (discord.ui): the real `exec` tool waits for a press,
every press is acknowledged within Discord's 3 s, only approvers count, a decision is made
once, expiry edits the card, and a card from a dead process is never left with dead buttons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_core.ports import ApprovalRecord
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_state import Interaction, StoredMessage
from tests.discord_harness import MEMBER, OWNER, Harness, dc, running  # noqa: F401  (dc is a fixture)

LABELS = {"✅ Approve once", "♾ Always in this session", "❌ Deny"}
DEFERRED_UPDATE = 6


async def cards(h: Harness, n: int = 1) -> list[StoredMessage]:
    dm = h.dc.dm_channel(OWNER)

    def found() -> list[StoredMessage] | None:
        shown = [m for m in h.dc.bot_messages(dm) if m.content.startswith("🔐")]
        return shown[:n] if len(shown) >= n else None

    return await h.dc.await_for(found)


async def press(h: Harness, card: StoredMessage, label: str, user: str = OWNER) -> Interaction:
    """Press a button; returns the interaction once it was acknowledged (or refused)."""
    iid = h.dc.press(card.id, user, label=label)

    def settled() -> Interaction | None:
        i = h.dc.interaction(iid)
        return i if i.acknowledged or i.rejected else None

    return await h.dc.await_for(settled)


def ephemeral_texts(i: Interaction) -> list[str]:
    return [f["content"] for f in i.followups if f["flags"] & 64]


async def test_owner_approves_then_the_tool_runs_and_the_run_continues(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    command = "echo approved >> marker.txt"
    fake_api.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("Done: the marker is written."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "write the marker")
        (card,) = await cards(h)
        assert command in card.content and "```" in card.content
        assert set(card.custom_ids) == LABELS
        assert all(cid.startswith("ap:") and len(cid) <= 100 for cid in card.custom_ids.values())
        assert not (h.workspace / "marker.txt").exists()  # waits for the button

        pressed = await press(h, card, "✅ Approve once")
        assert pressed.responses[0]["type"] == DEFERRED_UPDATE and not pressed.rejected
        await h.bot_text(dm, lambda t: t == "Done: the marker is written.")
        assert (h.workspace / "marker.txt").read_text() == "approved\n"
        decided = await h.dc.await_for(lambda: (m := dc.message(card.id)).content.endswith("by Olivia.**") and m)
        assert decided.components == [] and command in decided.content
        assert decided.allowed_mentions == {"parse": []}


async def test_a_non_owner_press_gets_an_ephemeral_refusal_and_changes_nothing(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "run it")
        (card,) = await cards(h)
        refused = await press(h, card, "✅ Approve once", user=MEMBER)
        await dc.await_for(lambda: ephemeral_texts(refused))
        assert ephemeral_texts(refused) == ["This approval isn't yours."]
        unchanged = dc.message(card.id)
        assert unchanged.edits == 0 and set(unchanged.custom_ids) == LABELS
        assert not (h.workspace / "marker.txt").exists()
        await press(h, card, "✅ Approve once")  # the owner still can
        await h.bot_text(dm, lambda t: t == "ok")
        assert (h.workspace / "marker.txt").read_text() == "ran\n"


async def test_double_press_executes_once(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "run it once")
        (card,) = await cards(h)
        taps = [dc.press(card.id, OWNER, label=label) for label in ("✅ Approve once", "✅ Approve once", "❌ Deny")]
        await dc.await_for(lambda: all(dc.interaction(t).acknowledged for t in taps))
        late = [dc.interaction(t) for t in taps[1:]]
        await dc.await_for(lambda: all(ephemeral_texts(i) for i in late))
        assert all(ephemeral_texts(i) == ["Already decided: ✅ Approved once by Olivia."] for i in late)
        await h.bot_text(dm, lambda t: t == "ok")
        assert (h.workspace / "marker.txt").read_text() == "ran\n"


async def test_expiry_edits_the_card_removes_the_buttons_and_the_tool_is_denied(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo late >> marker.txt"})), reply_text("understood"))
    async with running(tmp_path, dc, fake_api, paced=False, agent={"approval_ttl_s": 0.5}) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "run it later")
        expired = await h.bot_text(dm, lambda t: t.startswith("🔐") and "Expired" in t)
        assert expired.components == []
        await h.bot_text(dm, lambda t: t == "understood")
        assert not (h.workspace / "marker.txt").exists()


def old_card(dc: FakeDiscord, channel: str, approval_id: str) -> str:
    """A card with live buttons posted by a process that has since died."""
    components = [{"type": 1, "components": [
        {"type": 2, "style": 3, "label": "✅ Approve once", "custom_id": f"ap:{approval_id}:o"},
        {"type": 2, "style": 4, "label": "❌ Deny", "custom_id": f"ap:{approval_id}:d"},
    ]}]
    return dc.post_as_bot(channel, "🔐 **exec** wants to run:\n```\nrm -rf build\n```\n⏳ Waiting", components)


async def plant_approval(tmp_path, record: ApprovalRecord) -> None:
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'home' / 'roost.db'}")
    try:
        await storage.create_approval(record)
    finally:
        await storage.aclose()


def approval(approval_id: str, **fields: object) -> ApprovalRecord:
    now = datetime.now(UTC)
    return ApprovalRecord(
        approval_id, "main", "run-dead", "call-1", "exec", "rm -rf build", f"discord:{OWNER}",
        now, now + timedelta(minutes=30), **fields,  # type: ignore[arg-type]
    )


async def test_a_card_left_pending_by_a_dead_process_is_expired_and_edited_at_start(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass  # creates the database
    card_id = old_card(dc, dm, "apr-dead-1")
    await plant_approval(tmp_path, approval("apr-dead-1", chat_ref=f"discord:{dm}:{card_id}"))
    async with running(tmp_path, dc, fake_api, paced=False):
        closed = await dc.await_for(lambda: (m := dc.message(card_id)).components == [] and m)
        assert "Expired" in closed.content and "rm -rf build" in closed.content
        assert not fake_api.requests


async def test_old_buttons_still_answer_after_a_restart_with_state_from_the_database(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """No view was registered for this card by the new process: the DynamicItem rebuilds
    the button from its custom_id and the database says what happened."""
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass
    card_id = old_card(dc, dm, "apr-dead-2")
    await plant_approval(tmp_path, approval(
        "apr-dead-2", state="deny", resolved_by=f"discord:{OWNER}", resolved_at=datetime.now(UTC),
    ))
    async with running(tmp_path, dc, fake_api, paced=False):
        iid = dc.press(card_id, OWNER, f"ap:apr-dead-2:o")
        pressed = await dc.await_for(lambda: ephemeral_texts(i := dc.interaction(iid)) and i)
        assert pressed.responses[0]["type"] == DEFERRED_UPDATE and not pressed.rejected
        assert ephemeral_texts(pressed)[0].startswith("Already decided: ❌ Denied")
        shown = await dc.await_for(lambda: (m := dc.message(card_id)).components == [] and m)
        assert "❌ Denied" in shown.content and "rm -rf build" in shown.content
        assert not fake_api.requests


async def test_a_long_action_arrives_whole_as_action_txt_and_its_buttons_work(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """An action too long for a readable card is attached in full, never truncated; the
    card says so and keeps its buttons."""
    payload = "".join(f"line-{i:04d}-" for i in range(200))  # 2,000 characters: over the card's 1,500
    command = f"echo {payload} > marker.txt"
    fake_api.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("Long one done."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "run the long one")
        (card,) = await cards(h)
        assert [a["filename"] for a in card.attachments] == ["action.txt"]
        assert card.attachments[0]["data"] == command  # the whole action, byte for byte
        assert "action.txt" in card.content and payload not in card.content
        assert len(card.content) < 2000 and set(card.custom_ids) == LABELS
        await press(h, card, "✅ Approve once")
        await h.bot_text(dm, lambda t: t == "Long one done.")
        assert (h.workspace / "marker.txt").read_text() == payload + "\n"
        decided = await h.dc.await_for(lambda: (m := dc.message(card.id)).components == [] and m)
        assert "Approved once" in decided.content
