"""Who may use which command in a group — through the real app, PTB against the fake Bot API.

Policy (bot/roles.py GROUP_COMMAND_RULES): /help, /start, /status and /model without an
argument: anyone; /new and /model <name>: the owner or the group's admins; /stop: the person
whose message started the run, the owner or the group's admins; anything else: the owner.
"""

from __future__ import annotations

import json

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import BOT_USERNAME, GROUP, MEMBER, OWNER, running, tg  # noqa: F401

OTHER = 78
KEY = f"group:telegram:{GROUP}"


def count(tg: FakeTelegram, start: str) -> int:
    return sum(1 for m in tg.bot_messages(GROUP) if (m.text or "").startswith(start))


async def test_a_group_member_cannot_wipe_or_switch_the_groups_session(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, agent={"fallback_models": ["claude-other"]}) as h:
        tg.send_group(GROUP, MEMBER, "remember the launch code word is heron", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.endswith("heron\n</untrusted>"))
        await h.app.conversations.lanes.drain()

        tg.send_group(GROUP, OTHER, f"/new@{BOT_USERNAME}", first_name="Mallory")
        await h.says(GROUP, "Only my owner or this group's admins can use /new here.")
        tg.send_group(GROUP, OTHER, f"/model@{BOT_USERNAME} claude-other", first_name="Mallory")
        await h.says(GROUP, "Only my owner or this group's admins can use /model here.")
        tg.send_group(GROUP, OTHER, f"/model@{BOT_USERNAME}", first_name="Mallory")  # looking is fine
        await h.bot_text(GROUP, lambda t: t.startswith("Current model: claude-test"))
        tg.send_group(GROUP, OTHER, f"/status@{BOT_USERNAME}", first_name="Mallory")
        await h.bot_text(GROUP, lambda t: t.startswith("Model: claude-test"))
        assert "heron" in json.dumps(await h.app.storage.load_transcript(KEY))  # nothing was wiped
        session = await h.app.storage.get_session(KEY)
        assert session is not None and session.model_override is None

        tg.send_group(GROUP, OWNER, f"/new@{BOT_USERNAME}", first_name="Olivia")
        await h.bot_text(GROUP, lambda t: t.startswith("Started a fresh session"))
        assert "heron" not in json.dumps(await h.app.storage.load_transcript(KEY))
        rows = await h.app.storage.audit_entries(limit=None)
    denied = [(r.actor, r.subject) for r in rows if r.kind == "command" and r.decision == "denied"]
    assert denied == [(f"telegram:{OTHER}", "/new"), (f"telegram:{OTHER}", "/model")]


async def test_only_who_asked_or_the_owner_may_stop_a_groups_answer(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        Reply(Text("Thinking about your question"), Stall(30)),
        Reply(Text("Thinking about Mallory's question"), Stall(30)),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, MEMBER, "a long question", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("Thinking about your question"))
        tg.send_group(GROUP, OTHER, f"/stop@{BOT_USERNAME}", first_name="Mallory")
        await h.says(GROUP, "Only the person who asked, my owner or this group's admins can stop this answer.")
        assert h.app.conversations.lanes.is_busy(KEY)
        tg.send_group(GROUP, MEMBER, f"/stop@{BOT_USERNAME}", first_name="Bob")
        await h.says(GROUP, "Stopped.")

        tg.send_group(GROUP, OTHER, "my turn", mention=True, first_name="Mallory")
        await h.bot_text(GROUP, lambda t: t.startswith("Thinking about Mallory's question"))
        tg.send_group(GROUP, MEMBER, f"/stop@{BOT_USERNAME}", first_name="Bob")  # Bob did not ask this one
        await tg.await_for(lambda: count(tg, "Only the person who asked") == 2)
        assert count(tg, "Stopped.") == 1 and h.app.conversations.lanes.is_busy(KEY)
        tg.send_group(GROUP, OWNER, f"/stop@{BOT_USERNAME}", first_name="Olivia")
        await tg.await_for(lambda: count(tg, "Stopped.") == 2)


async def test_owner_only_commands_are_refused_to_members_in_a_group(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, MEMBER, f"/revoke@{BOT_USERNAME} telegram:{OWNER}", first_name="Bob")
        await h.says(GROUP, "Only my owner can use /revoke here.")
        tg.send_group(GROUP, MEMBER, f"/audit@{BOT_USERNAME}", first_name="Bob")
        await h.says(GROUP, "Only my owner can use /audit here.")
        assert not fake_api.requests
