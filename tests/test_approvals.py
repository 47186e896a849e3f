"""The approval gate end to end through the loop: decisions, expiry, grants, idempotency."""

from __future__ import annotations

import asyncio

from agent_core.approvals import Decision, ResolveOutcome
from agent_core.events import ApprovalRequested, ApprovalResolved, RunFinished
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.harness import OWNER, CoreHarness, make_harness


def last_results(core: CoreHarness) -> list[dict]:
    return [b for b in user_blocks(core.fake.requests[-1].json) if b.get("type") == "tool_result"]


async def run_deciding(core: CoreHarness, text: str, decide) -> list:
    async def on_event(event) -> None:
        if isinstance(event, ApprovalRequested):
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(decide(event)))

    return await core.run(text, on_event=on_event)


async def test_approved_once_runs_and_run_continues(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("danger", {"text": "rm -rf build"})), reply_text("cleaned"))
    events = await run_deciding(core, "clean", lambda e: core.gate.resolve(e.approval_id, Decision.ONCE, OWNER))
    requested = next(e for e in events if isinstance(e, ApprovalRequested))
    assert requested.action == "danger rm -rf build"
    assert core.executed == ["rm -rf build"]
    assert isinstance(events[-1], RunFinished) and events[-1].text == "cleaned"
    record = await core.storage.get_approval(requested.approval_id)
    assert record.state == "once" and record.resolved_by == OWNER


async def test_denied_tool_does_not_run_and_model_is_told(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("danger", {"text": "x"})), reply_text("ok, not doing it"))
    await run_deciding(core, "do", lambda e: core.gate.resolve(e.approval_id, Decision.DENY, OWNER))
    assert core.executed == []
    result = last_results(core)[0]
    assert result["is_error"] and "denied" in result["content"]


async def test_non_owner_cannot_decide_and_nothing_changes(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("danger", {"text": "x"})), reply_text("done"))
    outcomes = []

    async def decide(event: ApprovalRequested) -> None:
        outcomes.append(await core.gate.resolve(event.approval_id, Decision.ONCE, "telegram:999"))
        record = await core.storage.get_approval(event.approval_id)
        outcomes.append(record.state)
        outcomes.append(await core.gate.resolve(event.approval_id, Decision.ONCE, OWNER))

    await run_deciding(core, "do", decide)
    assert outcomes[0].outcome is ResolveOutcome.NOT_YOURS
    assert outcomes[1] == "pending"
    assert outcomes[2].outcome is ResolveOutcome.RESOLVED
    assert core.executed == ["x"]


async def test_double_tap_executes_once(core: CoreHarness) -> None:
    core.fake.script(reply_tools(ToolUse("danger", {"text": "once"})), reply_text("done"))
    outcomes = []

    async def decide(event: ApprovalRequested) -> None:
        both = await asyncio.gather(
            core.gate.resolve(event.approval_id, Decision.ONCE, OWNER),
            core.gate.resolve(event.approval_id, Decision.ONCE, OWNER),
        )
        outcomes.extend(r.outcome for r in both)

    await run_deciding(core, "do", decide)
    assert sorted(outcomes) == sorted([ResolveOutcome.RESOLVED, ResolveOutcome.ALREADY_DECIDED])
    assert core.executed == ["once"]


async def test_expiry_denies_and_reports(fake_api, tmp_path) -> None:
    core = await make_harness(fake_api, tmp_path, approval_ttl_s=0.2)
    try:
        fake_api.script(reply_tools(ToolUse("danger", {"text": "late"})), reply_text("it expired"))
        events = await core.run("do")
        resolved = next(e for e in events if isinstance(e, ApprovalResolved))
        assert resolved.decision == "expired"
        assert core.executed == []
        assert "expired" in last_results(core)[0]["content"]
        late = await core.gate.resolve(resolved.approval_id, Decision.ONCE, OWNER)
        assert late.outcome is ResolveOutcome.ALREADY_DECIDED and late.record.state == "expired"
    finally:
        await core.llm.aclose()
        await core.storage.aclose()


async def test_always_allow_covers_only_the_exact_input(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("danger", {"text": "a"})),
        reply_tools(ToolUse("danger", {"text": "a"})),
        reply_tools(ToolUse("danger", {"text": "b"})),
        reply_text("all done"),
    )
    asked = []

    async def decide(event: ApprovalRequested) -> None:
        asked.append(event.action)
        decision = Decision.ALWAYS if event.action == "danger a" else Decision.ONCE
        await core.gate.resolve(event.approval_id, decision, OWNER)

    await run_deciding(core, "do", decide)
    # "a" was asked once and then granted; "b" is another input, so it is asked again
    assert core.executed == ["a", "a", "b"] and asked == ["danger a", "danger b"]
    [grant] = await core.storage.grants("main")
    assert (grant.rule.tool_name, grant.rule.input, grant.created_by) == ("danger", '{"text":"a"}', OWNER)
    # the rule is stored: a later run of the same session does not ask again for "a"
    core.fake.script(reply_tools(ToolUse("danger", {"text": "a"})), reply_text("x"))
    await run_deciding(core, "do", decide)
    assert core.executed == ["a", "a", "b", "a"] and len(asked) == 2


async def test_control_characters_in_an_action_are_shown_escaped(core: CoreHarness) -> None:
    hidden = "echo hidden; : \r\x1b[2Kls -la \u202etxt.exe\u200b"
    core.fake.script(reply_tools(ToolUse("danger", {"text": hidden})), reply_text("ok"))
    seen: list[ApprovalRequested] = []

    async def decide(event: ApprovalRequested) -> None:
        seen.append(event)
        await core.gate.resolve(event.approval_id, Decision.DENY, OWNER)

    await run_deciding(core, "do", decide)
    shown = "danger echo hidden; : \\r\\x1b[2Kls -la \\u202etxt.exe\\u200b"
    assert seen[0].action == shown
    stored = await core.storage.get_approval(seen[0].approval_id)
    assert stored is not None and stored.action == shown
    assert not any(ch in stored.action for ch in "\r\x1b\u202e\u200b")


async def test_two_approvals_pending_in_one_turn(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("danger", {"text": "one"}), ToolUse("danger", {"text": "two"})),
        reply_text("done"),
    )
    pending: list[ApprovalRequested] = []
    both = asyncio.Event()

    async def on_event(event) -> None:
        if isinstance(event, ApprovalRequested):
            pending.append(event)
            if len(pending) == 2:
                both.set()

    run = asyncio.create_task(core.run("two", on_event=on_event))
    await asyncio.wait_for(both.wait(), 5)
    assert {p.action for p in pending} == {"danger one", "danger two"}
    await core.gate.resolve(pending[1].approval_id, Decision.DENY, OWNER)
    await core.gate.resolve(pending[0].approval_id, Decision.ONCE, OWNER)
    await asyncio.wait_for(run, 5)
    approved = pending[0].action.split()[1]
    assert core.executed == [approved]


async def test_sub_scope_denies_exec_and_write_without_asking(core: CoreHarness) -> None:
    from agent_core.risk import Scope

    core.fake.script(reply_tools(ToolUse("danger", {"text": "x"}), ToolUse("note", {"text": "y"})), reply_text("no"))
    events = await core.run("do", session_key="group:telegram:-5", scope=Scope.SUB)
    assert not any(isinstance(e, ApprovalRequested) for e in events)
    assert core.executed == []
    denied = last_results(core)
    assert all(r["is_error"] and "Denied by policy" in r["content"] for r in denied)


async def test_the_terminal_shows_the_command_that_will_run(core: CoreHarness) -> None:
    import io

    from adapters.console import ConsoleAdapter
    from agent_core.inbound import ReplyTarget

    hidden = "echo hidden; : \r\x1b[2Kls -la"
    core.fake.script(reply_tools(ToolUse("danger", {"text": hidden})), reply_text("ok"))
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    reply = console.open_reply(ReplyTarget("console", "console"))

    async def on_event(event) -> None:
        await reply.handle(event)
        if isinstance(event, ApprovalRequested):
            await core.gate.resolve(event.approval_id, Decision.DENY, OWNER)

    await core.run("do", on_event=on_event)
    shown = out.getvalue()
    assert "danger echo hidden; : \\r\\x1b[2Kls -la" in shown
    assert "\r" not in shown and "\x1b" not in shown
