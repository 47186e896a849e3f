"""The whole path: inbound → router → lane → loop → reply sink, with the real SDK and storage."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timedelta

from agent_core.policy import GrantRule
from bot.conversations import KEPT_NOTICE
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_script import Reply, Text, ToolUse, addressed, reply_text, reply_tools, user_blocks
from tests.fakes.recording_adapter import group, private
from workspace.daily_log import log_path

CANARY_USER = "CANARY-USER-7f3a"
CANARY_MEMORY = "CANARY-MEMORY-19bc"
CANARY_LOG = "CANARY-TODAY-LOG-55de"
CANARY_YESTERDAY = "CANARY-YESTERDAY-0c41"


def plant_canaries(root) -> None:
    (root / "USER.md").write_text(f"# User\nSecret about the owner: {CANARY_USER}\n")
    (root / "MEMORY.md").write_text(f"# Memory\nPrivate fact: {CANARY_MEMORY}\n")
    today = datetime.now().astimezone()
    for day, canary in ((today, CANARY_LOG), (today - timedelta(days=1), CANARY_YESTERDAY)):
        path = log_path(root, "main", day.date())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Log\n- owner said: {canary}\n")


async def test_private_memory_never_reaches_a_group_request(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        plant_canaries(app.settings.workspace_dir)
        await adapter.say(private(OWNER_ID, "what do you know about me?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        main_body = fake_api.requests[-1].body.decode()
        for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_YESTERDAY):
            assert canary in main_body, f"{canary} missing from the main session's request"
        # the owner's private chat text itself went into today's main log too
        await adapter.say(group("-100", "42", "@roost what do you know about the owner?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
        # the owner mentioning the bot in a group is still a group session
        await adapter.say(group("-100", OWNER_ID, "@roost and now?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 3)
        group_bodies = [r.body.decode() for r in fake_api.requests[1:]]
        assert len(group_bodies) == 2
        for body in group_bodies:
            for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_YESTERDAY, "what do you know about me"):
                assert canary not in body, f"{canary} leaked into a group request"


async def test_messages_to_a_busy_session_are_all_answered_in_order(tmp_path, fake_api) -> None:
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_text(body)}", delay_s=0.01))
    async with running_app(tmp_path, fake_api, agent={"queue_mode": "followup"}) as (app, adapter):
        for i in range(20):
            await adapter.say(private(OWNER_ID, f"message {i}"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 20, timeout=30)
        answers = [r.outcome.text for r in adapter.replies]
        assert answers == [f"answer to message {i}" for i in range(20)]


async def test_collect_mode_hands_queued_messages_to_the_next_run_in_order(tmp_path, fake_api) -> None:
    release = asyncio.Event()
    fake_api.script(Reply(Text("first answer", delay_s=0.0)))
    async with running_app(tmp_path, fake_api) as (app, adapter):
        async def hold(event) -> None:
            if not release.is_set():
                await release.wait()

        adapter.on_event = hold
        await adapter.say(private(OWNER_ID, "message 0"))
        for i in range(1, 20):
            await adapter.say(private(OWNER_ID, f"message {i}"))
        adapter.on_event = None
        release.set()
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2, timeout=30)
        second = user_blocks(fake_api.requests[-1].json)
        texts = [b["text"] for b in second if b["type"] == "text"]
        assert texts == [f"message {i}" for i in range(1, 20)]
        busy_notices = [n for _, n in adapter.notices if "Got it" in n]
        assert len(busy_notices) == 1


async def test_fifty_sessions_run_concurrently(tmp_path, fake_api) -> None:
    fake_api.responder = lambda body: Reply(Text("x" * 40, chunk_size=10, delay_s=0.1))
    async with running_app(tmp_path, fake_api, agent={"max_concurrent_runs": 64}) as (app, adapter):
        started = time.monotonic()
        for chat in range(50):
            await adapter.say(group(f"-{chat + 1}", "7", "@roost hi"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 50, timeout=60)
        elapsed = time.monotonic() - started
        # One answer streams for ≥ 0.4 s, so serial runs would take ≥ 20 s. Anything below
        # that proves concurrency; a tighter bound only measures how loaded the machine is.
        assert elapsed < 20, f"50 sessions took {elapsed:.1f} s: they ran one after another"
        assert all(r.outcome is not None and r.outcome.text == "x" * 40 for r in adapter.replies)
        assert len({r.target.chat_id for r in adapter.replies}) == 50


async def test_redelivered_update_is_answered_once(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "hello", update_id="900"))
        await adapter.say(private(OWNER_ID, "hello", update_id="900"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await app.conversations.lanes.drain()
        assert len(adapter.replies) == 1 and len(fake_api.requests) == 1


async def test_unmentioned_group_messages_become_context_for_the_next_mention(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(group("-7", "5", "the deploy is at 3pm", mentioned=False))
        await adapter.say(group("-7", "6", "bring snacks", mentioned=False))
        await app.conversations.lanes.drain()
        assert adapter.replies == [] and fake_api.requests == []
        await adapter.say(group("-7", "5", "@roost when is the deploy?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        body = fake_api.requests[-1].body.decode()
        assert "user5: the deploy is at 3pm" in body and "user6: bring snacks" in body


async def test_forum_topics_and_groups_are_separate_sessions(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(group("-9", "5", "@roost topic one secret ALPHA", thread="11"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await adapter.say(group("-9", "5", "@roost what was said?", thread="12"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
        assert "ALPHA" not in fake_api.requests[-1].body.decode()
        keys = {s for s in [r.target.thread_id for r in adapter.replies]}
        assert keys == {"11", "12"}


async def test_stranger_gets_a_pairing_code_and_the_owner_approves(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private("77", "hi bot"))
        assert fake_api.requests == []
        stranger_notice = next(text for target, text in adapter.notices if target.chat_id == "77")
        code = stranger_notice.split("pairing code is ")[1].split()[0]
        assert len(code) == 8 and not set(code) & set("0O1I")
        owner_notice = next(text for target, text in adapter.notices if target.chat_id == OWNER_ID)
        assert code in owner_notice
        await adapter.say(private(OWNER_ID, f"/pair {code}"))
        assert any("Paired" in text for _, text in adapter.notices)
        await adapter.say(private("77", "now?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        assert adapter.replies[0].outcome.text == f"echo: {addressed('user77', 'now?')}"


async def test_commands_new_status_model_and_unknown(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api, agent={"fallback_models": ["claude-other"]}) as (app, adapter):
        await adapter.say(private(OWNER_ID, "remember ZEBRA"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await adapter.say(private(OWNER_ID, "/status"))
        status = adapter.notices[-1][1]
        assert "Model: claude-test" in status and "Runs: 1" in status and "Session: main" in status
        await adapter.say(private(OWNER_ID, "/model claude-other"))
        assert "claude-other" in adapter.notices[-1][1]
        await adapter.say(private(OWNER_ID, "/model nope"))
        assert "not configured" in adapter.notices[-1][1]
        await adapter.say(private(OWNER_ID, "/new"))
        assert "fresh session" in adapter.notices[-1][1]
        await adapter.say(private(OWNER_ID, "what did I say?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
        last = fake_api.requests[-1].json
        assert last["model"] == "claude-other"
        # The earlier conversation is not sent (today's log, in Roost's context tail, may name it).
        assert "ZEBRA" not in json.dumps(last["messages"][:-1]) + json.dumps(user_blocks(last))
        await adapter.say(private(OWNER_ID, "/frobnicate"))
        assert "Unknown command /frobnicate" in adapter.notices[-1][1]


async def test_stop_cancels_the_running_answer(tmp_path, fake_api) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "sleep 30"})))
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "run something long"))
        await adapter.wait_for(lambda: any(getattr(e, "type", "") == "approval_requested" for r in adapter.replies for e in r.events))
        await adapter.say(private(OWNER_ID, "/stop"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        assert adapter.replies[0].cancelled
        assert adapter.notices[-1][1] == "Stopped."
        await adapter.say(private(OWNER_ID, "hello again"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
        assert fake_api.requests[-1].status == 200


async def test_oversized_message_is_refused_with_a_clear_error(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "x" * 60_000))
        assert "at most 50,000" in adapter.notices[-1][1]
        assert fake_api.requests == []


async def test_each_run_leaves_an_entry_in_the_sessions_own_log(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(group("-3", "5", "@roost note GROUPWORD"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await app.conversations.lanes.drain()
        root = app.settings.workspace_dir
        today = datetime.now().astimezone().date()
        group_log = log_path(root, "group:telegram:-3", today).read_text()
        assert "GROUPWORD" in group_log
        main_log = log_path(root, "main", today)
        assert not main_log.exists() or "GROUPWORD" not in main_log.read_text()


def last_text(body: dict) -> str:
    blocks = user_blocks(body)
    return [b["text"] for b in blocks if b.get("type") == "text"][-1]


async def test_new_resets_always_allow_grants(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await app.storage.add_grant(GrantRule("main", "exec", "ls"))
        await adapter.say(private(OWNER_ID, "/new"))
        assert "1 'always allow' permission(s) were reset" in adapter.notices[-1][1]
        assert await app.storage.grants("main") == []


async def test_shutdown_keeps_queued_messages_for_the_next_start(tmp_path, fake_api) -> None:
    fake_api.script(reply_tools(ToolUse("exec", {"command": "sleep 30"})))
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "long job"))
        await adapter.wait_for(lambda: any(e.type == "approval_requested" for r in adapter.replies for e in r.events))
        await adapter.say(private(OWNER_ID, "and this too"))
        await app.conversations.aclose()
        assert adapter.replies[0].cancelled
        assert adapter.notices[-1][1] == KEPT_NOTICE
        await adapter.say(private(OWNER_ID, "after close"))
        assert adapter.notices[-1][1] == KEPT_NOTICE
        assert not any("send it again" in text for _, text in adapter.notices)
        waiting = await app.storage.inbox_rows({"queued"})
        assert [r.message.text for r in waiting] == ["and this too", "after close"]
    async with running_app(tmp_path, fake_api) as (app, adapter):
        assert await app.conversations.load_inbox() == 2
        await app.conversations.replay_inbox()
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await app.conversations.lanes.drain()
        last = user_blocks(fake_api.requests[-1].json)
        assert [b["text"] for b in last if b["type"] == "text"] == ["and this too", "after close"]
        assert len(fake_api.requests) == 2  # the stopped run is not asked again
        assert await app.storage.inbox_rows({"received", "queued", "running"}) == []


async def test_group_admin_commands_for_another_bot_are_ignored(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api, telegram={"allowed_groups": []}) as (app, adapter):
        await adapter.say(group("-55", OWNER_ID, "/allow@other_bot", mentioned=False))
        assert not await app.storage.is_group_allowed("telegram", "-55")
        await adapter.say(group("-55", OWNER_ID, "/allow"))
        assert await app.storage.is_group_allowed("telegram", "-55")
        await adapter.say(group("-55", "42", "/disallow"))
        assert "Only my owner" in adapter.notices[-1][1]
    async with running_app(tmp_path / "b", fake_api) as (app, adapter):
        await adapter.say(group("-56", OWNER_ID, "/disallow"))
        assert "allowed by the configuration" in adapter.notices[-1][1]


async def test_start_up_closes_cards_of_approvals_the_old_process_left_pending(tmp_path, fake_api) -> None:
    from datetime import UTC, datetime, timedelta

    from agent_core.ports import ApprovalRecord
    from bot.storage import Storage

    home = tmp_path / "home"
    home.mkdir()
    storage = await Storage.open(f"sqlite+aiosqlite:///{home / 'roost.db'}")
    now = datetime.now(UTC)
    await storage.ensure_session("main", "main")
    await storage.start_run("r-old", "main", "m")
    await storage.create_approval(ApprovalRecord("ap1", "main", "r-old", "c1", "exec", "rm x", "telegram:1",
                                                 now, now + timedelta(minutes=10)))
    await storage.set_approval_chat_ref("ap1", "telegram:1::77")
    await storage.aclose()
    async with running_app(tmp_path, fake_api) as (app, adapter):
        assert [r.id for r in app.expired_at_start] == ["ap1"]
        await app.conversations.close_expired_cards(app.expired_at_start)
        assert adapter.notices[-1][1] == "card-expired:ap1:expired"
        assert (await app.storage.get_approval("ap1")).state == "expired"


async def test_an_unwritable_daily_log_loses_no_answer(tmp_path, fake_api, caplog) -> None:
    """The run's log append runs on the loop now: a log that cannot be written (here a
    folder where today's file should be) is reported as such and skipped; the answer and
    the next message (whose prompt reads that log) are unaffected."""
    fake_api.script(reply_text("first answer"), reply_text("second answer"))
    async with running_app(tmp_path, fake_api) as (app, adapter):
        log_path(app.settings.workspace_dir, "main", datetime.now().astimezone().date()).mkdir(parents=True)
        await adapter.say(private(OWNER_ID, "one"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await adapter.say(private(OWNER_ID, "two"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
        assert [r.text for r in adapter.closed_replies()] == ["first answer", "second answer"]
    assert [r.getMessage() for r in caplog.records if r.getMessage() == "daily_log.write_failed"] == [
        "daily_log.write_failed"
    ] * 2
