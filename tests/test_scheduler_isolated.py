"""Isolated jobs (`schedule` with isolated=true) through the whole app: each run is a fresh
session of its own — no earlier chat history — with main's memory only when created in main,
a group's sub-scope rules when created in a group, and the answer posted, named, in the chat
the job was made in."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from agent_core.risk import Scope
from bot.session_keys import isolated_key, origin_of, scope_of
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduler_support import FakeClock, running_at, tick
from tests.telegram_harness import GROUP, OWNER, tg  # noqa: F401  (fixture)
from tests.test_schedule_tool import text_of, tool_results
from workspace.daily_log import log_dir_for, session_dir_for

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
MEMORY_CANARY = "CANARY-memory-5e1d"
CHAT_CANARY = "CANARY-chat-history-91b0"
GROUP_WRITES = {"groups": {f"telegram:{GROUP}": {"write": "allow"}}}


def body(request: object) -> str:
    return request.body.decode(errors="replace")  # type: ignore[attr-defined]


def test_isolated_keys_keep_their_chats_scope_and_get_folders_of_their_own() -> None:
    main_job = isolated_key("main", "ab12cd34")
    group_job = isolated_key(f"group:telegram:{GROUP}", "ab12cd34")
    dm_job = isolated_key("dm:discord:42", "ab12cd34")
    assert scope_of(main_job) is Scope.MAIN
    assert scope_of(group_job) is Scope.SUB and scope_of(dm_job) is Scope.SUB
    assert [origin_of(k) for k in (main_job, group_job, dm_job)] == ["main", f"group:telegram:{GROUP}", "dm:discord:42"]
    # Their own logs (never the chat's, which hold its history); main's job sees main's workspace.
    assert log_dir_for(main_job).parts[:2] == ("memory", "jobs") and session_dir_for(main_job) is None
    assert log_dir_for(group_job) != log_dir_for(f"group:telegram:{GROUP}")
    assert session_dir_for(group_job) != session_dir_for(f"group:telegram:{GROUP}")
    assert log_dir_for(dm_job) != log_dir_for("dm:discord:42")


async def test_isolated_main_job_has_main_memory_but_no_chat_history_and_answers_in_the_chat(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        (h.workspace / "MEMORY.md").write_text(f"# Memory\n\n{MEMORY_CANARY}\n")
        fake_api.script(reply_text("Noted."))
        tg.send_private(OWNER, f"my secret plan is {CHAT_CANARY}")
        await h.says(OWNER, "Noted.")
        fake_api.script(
            reply_tools(ToolUse("schedule", {"action": "create", "name": "report", "prompt": "Write the daily report",
                                             "every_minutes": 60, "isolated": True})),
            reply_text("Scheduled."),
        )
        tg.send_private(OWNER, "every hour write the daily report, on its own")
        await h.says(OWNER, "Scheduled.")
        (job,) = await h.app.storage.list_jobs("main")
        assert job.isolated and job.session_key == "main"
        assert "isolated" in text_of(tool_results(fake_api, 2)[0])

        fake_api.script(reply_tools(ToolUse("memory_search", {"query": MEMORY_CANARY})), reply_text("Report 1."))
        clock.advance(minutes=60)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.says(OWNER, "⏰ report\n\nReport 1.")
        await h.app.conversations.lanes.drain()
        (found,) = tool_results(fake_api, len(fake_api.requests) - 1)
        assert not found.get("is_error") and MEMORY_CANARY in text_of(found)  # main's memory search
        first = fake_api.requests[-2]
        fake_api.script(reply_text("Report 2."))
        clock.advance(minutes=60)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.says(OWNER, "⏰ report\n\nReport 2.")
        await h.app.conversations.lanes.drain()
        second = fake_api.requests[-1]
        for request in (first, second):
            assert MEMORY_CANARY in body(request)  # main's memory
            assert CHAT_CANARY not in body(request)  # not the chat's transcript
            (user,) = [m for m in request.json["messages"] if m["role"] == "user"]  # a fresh transcript
            assert "Write the daily report" in json.dumps(user)
        assert "Report 1." not in body(second)  # nor the job's own previous run
        ran = await h.app.storage.get_job(job.id)
        assert ran is not None and (ran.last_exec, ran.last_delivery) == ("ok", "delivered")
        # The chat's own session goes on where it was.
        fake_api.script(reply_text("Still here."))
        tg.send_private(OWNER, "what was my plan?")
        await h.says(OWNER, "Still here.")
        assert CHAT_CANARY in body(fake_api.requests[-1])
        assert "Report 1." not in body(fake_api.requests[-1])


async def test_isolated_group_job_gets_the_groups_sub_scope_never_main_memory(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock, policy=GROUP_WRITES) as h:
        (h.workspace / "MEMORY.md").write_text(f"# Memory\n\n{MEMORY_CANARY}\n")
        fake_api.script(reply_text("Hi all."))
        tg.send_group(GROUP, OWNER, f"@roost_bot hello, {CHAT_CANARY}", mention=True, first_name="Olivia")
        await h.bot_text(GROUP, lambda t: t == "Hi all.")
        fake_api.script(
            reply_tools(ToolUse("schedule", {"action": "create", "name": "digest", "prompt": "Post the digest",
                                             "delay_minutes": 5, "isolated": True})),
            reply_text("Scheduled."),
        )
        tg.send_group(GROUP, OWNER, "@roost_bot schedule the digest", mention=True, first_name="Olivia")
        await h.bot_text(GROUP, lambda t: t == "Scheduled.")
        (job,) = await h.app.storage.list_jobs()
        assert job.isolated and job.session_key == f"group:telegram:{GROUP}"

        fake_api.script(
            reply_tools(ToolUse("exec", {"command": "cat MEMORY.md"}), ToolUse("read_file", {"path": "MEMORY.md"}),
                        ToolUse("memory_search", {"query": "CANARY"})),
            reply_text("Digest: nothing private."),
        )
        clock.advance(minutes=5)
        await tick(h.app.scheduler)  # type: ignore[arg-type]
        await h.bot_text(GROUP, lambda t: t == "⏰ digest\n\nDigest: nothing private.")
        await h.app.conversations.lanes.drain()
        run_first = fake_api.requests[-2]
        assert CHAT_CANARY not in body(run_first)  # no chat history, not even the group's recent lines
        assert "Post the digest" in body(run_first)
        results = tool_results(fake_api, len(fake_api.requests) - 1)
        assert len(results) == 3 and all(r.get("is_error") or MEMORY_CANARY not in text_of(r) for r in results)
        assert results[0].get("is_error") and results[1].get("is_error")  # exec denied, MEMORY.md unavailable
    assert not any(MEMORY_CANARY in body(r) for r in fake_api.requests)
    assert not any(MEMORY_CANARY in (m.text or "") for m in tg.bot_messages(GROUP))
    assert not any("Digest" in (m.text or "") for m in tg.bot_messages(OWNER))


async def test_isolated_is_only_for_create(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    clock = FakeClock(T0)
    async with running_at(tmp_path, tg, fake_api, clock) as h:
        fake_api.script(
            reply_tools(ToolUse("schedule", {"action": "list", "isolated": True})),
            reply_text("Oops."),
        )
        tg.send_private(OWNER, "list isolated")
        await h.says(OWNER, "Oops.")
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "isolated applies only to create" in text_of(result)


async def test_isolated_job_in_a_topic_is_refused_not_run_under_the_chats_wider_rules(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A topic's own policy entry names `group:<chat>:<topic>`; a session below it would fall
    back to the chat's entry, which may allow more — so isolated jobs are refused there."""
    forum = -1009876543
    policy = {"groups": {f"telegram:{forum}": {"write": "allow"}}}
    async with running_at(tmp_path, tg, fake_api, FakeClock(T0), policy=policy) as h:
        fake_api.script(
            reply_tools(ToolUse("schedule", {"action": "create", "prompt": "x", "delay_minutes": 5,
                                             "isolated": True})),
            reply_text("Can't here."),
        )
        tg.send_group(forum, OWNER, "@roost_bot schedule it", mention=True, thread_id=7, first_name="Olivia")
        await h.bot_text(forum, lambda t: t == "Can't here.")
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "cannot be created in a topic thread" in text_of(result)
        assert await h.app.storage.list_jobs(include_ended=True) == []
