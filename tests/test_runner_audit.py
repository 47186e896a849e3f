"""Every tool call leaves an audit entry (who, session, tool, normalised input without
secrets, decision, approver, status, size, duration), and error text shown to a chat carries
no machine path."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_core.approvals import Decision
from agent_core.risk import Scope
from tests.runner_harness import OWNER, runner_harness


async def test_each_path_of_a_tool_call_is_audited(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        await runner.call("reader", {"text": "hello"})
        runner.decision = Decision.ONCE
        await runner.call("exec", {"command": "ls -la"})
        runner.decision = Decision.DENY
        await runner.call("exec", {"command": "rm -rf /"})
        await runner.call("writer", {"text": "x"}, session_key="group:telegram:-5", scope=Scope.SUB,
                          requester="telegram:77")
        await runner.call("nope", {})
        await runner.call("reader", {"text": 5})
        got = [(e.subject, e.decision, e.approver, e.status) for e in runner.audit.entries]
        assert got == [
            ("reader", "allow", None, "ok"),
            ("exec", "ask", OWNER, "ok"),
            ("exec", "ask", OWNER, "denied"),
            ("writer", "deny", None, "denied"),
            ("nope", "", None, "error"),
            ("reader", "", None, "error"),
        ]
        first, ran, _, denied, *_ = runner.audit.entries
        assert (first.kind, first.actor, first.session_key) == ("tool_call", OWNER, "main")
        assert first.detail == '{"text":"hello"}' and first.size == len("reader did hello")
        assert first.duration_s is not None and first.duration_s >= 0
        assert ran.detail == "ls -la"  # exec: the command line itself
        assert (denied.actor, denied.session_key) == ("telegram:77", "group:telegram:-5")


async def test_audit_rows_never_hold_a_secret_value(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ONCE
        command = (
            "ANTHROPIC_API_KEY=sk-ant-secret1 curl -H 'Authorization: Bearer tok-secret2' "
            "https://me:pw-secret3@example.org && export GITHUB_TOKEN=\"ghp-secret4\""
        )
        await runner.call("exec", {"command": command})
        await runner.call("reader", {"text": '{"db_password": "secret5"}'})
        text = " ".join(e.detail for e in runner.audit.entries)
        for n in range(1, 6):
            assert f"secret{n}" not in text
        assert "ANTHROPIC_API_KEY=***" in text and "GITHUB_TOKEN=" in text
        assert runner.ran("exec") == [command]  # redaction is for the record, not the command


async def test_a_cancelled_call_is_audited_as_cancelled(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ONCE
        started = asyncio.Event()

        async def pending_approval() -> None:
            from agent_core.tool_runner import ToolCall
            from agent_core.tools import ToolContext

            await runner.storage.ensure_session("main", "main")
            await runner.storage.start_run("run-c", "main", "test")
            ctx = ToolContext("main", Scope.MAIN, runner.workspace, run_id="run-c", requester=OWNER)

            async def emit(event) -> None:  # noqa: ANN001
                if event.type == "approval_requested":
                    started.set()

            await runner.runner.run_all([ToolCall("c1", "exec", {"command": "sleep 1"})], ctx, set(), emit)

        task = asyncio.create_task(pending_approval())
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        [entry] = runner.audit.entries
        assert (entry.subject, entry.decision, entry.status) == ("exec", "ask", "cancelled")


async def test_error_text_carries_no_machine_path(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        outcome = await runner.call("crash", {"path": "notes/health.md"}, session_key="group:telegram:-5",
                                    scope=Scope.SUB)
        assert outcome.is_error
        assert str(tmp_path) not in outcome.content
        assert "'notes/health.md'" in outcome.content


async def test_a_call_allowed_by_a_stored_grant_says_so(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ALWAYS
        await runner.call("exec", {"command": "uptime"})
        await runner.call("exec", {"command": "uptime"})
        asked, granted = runner.audit.entries
        assert (asked.decision, asked.approver) == ("ask", OWNER)
        assert (granted.decision, granted.approver, granted.status) == ("allow", "grant", "ok")
