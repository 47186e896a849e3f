"""The operations layer: each verb checks the actor's role once, whatever surface calls it;
a decision made through it is the gate's own (same row, decided once)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent_core.approvals import ApprovalGate, Decision, ResolveOutcome
from agent_core.events import ApprovalRequested, ApprovalResolved
from agent_core.policy import GrantRule
from agent_core.risk import Risk
from bot.operations import Actor, AuditQuery, Forbidden, Live, Operations
from bot.operations.core import export_rows
from bot.roles import Role
from bot.storage import Storage

OWNER = Actor("telegram:1", Role.OWNER, "dashboard")
APPROVER = Actor("telegram:2", Role.APPROVER, "chat")
PAIRED = Actor("telegram:3", Role.PAIRED, "chat")


@pytest.fixture
async def storage(tmp_path: Path):
    s = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    yield s
    await s.aclose()


async def test_a_paired_user_is_refused_every_owner_verb_and_nothing_changes(storage: Storage) -> None:
    grant = await storage.add_grant(GrantRule("main", "exec", "ls"), created_by="telegram:1")
    ops = Operations(storage, owners=["telegram:1"], approvers=["telegram:2"])
    for call in (
        ops.grants(PAIRED), ops.revoke_grant(PAIRED, str(grant.id)), ops.jobs(PAIRED),
        ops.audit(PAIRED, AuditQuery()), ops.access_listing(PAIRED), ops.sessions(PAIRED),
        ops.pending_approvals(PAIRED),
    ):
        with pytest.raises(Forbidden):
            await call
    with pytest.raises(Forbidden):  # an approver decides approvals, nothing more
        await ops.revoke_grant(APPROVER, str(grant.id))
    assert [g.id for g in await storage.grants()] == [grant.id]
    assert "Revoked" in await ops.revoke_grant(OWNER, str(grant.id))
    rows = await ops.audit(OWNER, AuditQuery(actor="telegram:1", decision="revoked"))
    assert [(r.kind, r.subject) for r in rows] == [("grant", "exec")]


async def test_a_dashboard_decision_resolves_the_gates_row_once_and_says_where(storage: Storage) -> None:
    gate = ApprovalGate(storage, approvers=["telegram:1", "telegram:2"])
    changes: list[int] = []
    gate.listeners.append(lambda: changes.append(1))
    events: list[object] = []
    requested = asyncio.Event()

    async def emit(event: object) -> None:
        events.append(event)
        if isinstance(event, ApprovalRequested):
            requested.set()

    ops = Operations(storage, owners=["telegram:1"], approvers=["telegram:2"], live=Live(gate=gate))
    waiting = asyncio.create_task(gate.request(
        session_key="main", run_id="r1", call_id="c1", tool_name="exec", risk=Risk.EXEC, action="ls", emit=emit,
    ))  # fmt: skip
    await asyncio.wait_for(requested.wait(), 5)
    [pending] = await ops.pending_approvals(OWNER)
    result = await ops.decide(OWNER, pending.id, Decision.ONCE)
    assert result.outcome is ResolveOutcome.RESOLVED
    assert await asyncio.wait_for(waiting, 5) is Decision.ONCE
    assert events[-1] == ApprovalResolved(pending.id, "once", "telegram:1", "dashboard")
    again = await ops.decide(APPROVER, pending.id, Decision.DENY)  # the chat's press, too late
    assert again.outcome is ResolveOutcome.ALREADY_DECIDED
    assert (await storage.get_approval(pending.id)).state == "once"
    assert await ops.pending_approvals(OWNER) == []
    assert len(changes) >= 2  # created, decided: the inbox refreshes on both


def test_a_csv_export_keeps_a_formula_as_text() -> None:
    from bot.storage.audit import AuditRow

    row = AuditRow(1, datetime(2026, 1, 1, tzinfo=UTC), "tool", "telegram:1", "main", "exec", "=HYPERLINK(x)",
                   "allowed", None, None, None, None)
    assert "'=HYPERLINK(x)" in export_rows([row], "csv")


MEMBER = Actor("telegram:5", Role.MEMBER, "chat")
STRANGER = Actor("telegram:6", Role.STRANGER, "chat")


async def test_a_group_member_lists_only_their_sessions_jobs_and_never_every_job(storage: Storage) -> None:
    from datetime import timedelta

    from bot.storage.jobs import NewJob

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    for job_id, key in (("aa11aa11", "group:telegram:-100"), ("bb22bb22", "main")):
        await storage.create_job(NewJob(
            id=job_id, name=job_id, prompt="check", session_key=key, platform="telegram", chat_kind="group",
            chat_id="-100", thread_id=None, creator="telegram:1", kind="interval", spec="3600", timezone="UTC",
            grace_s=1800, next_run_at=now + timedelta(hours=1), created_at=now,
        ))  # fmt: skip
    ops = Operations(storage, owners=["telegram:1"])
    assert [j.id for j in await ops.session_jobs(MEMBER, "group:telegram:-100")] == ["aa11aa11"]
    for call in (ops.jobs(MEMBER), ops.session_jobs(STRANGER, "group:telegram:-100"),
                 ops.usage_text(MEMBER, now, session_key=None)):  # fmt: skip
        with pytest.raises(Forbidden):
            await call
    assert {j.id for j in await ops.jobs(OWNER)} == {"aa11aa11", "bb22bb22"}
