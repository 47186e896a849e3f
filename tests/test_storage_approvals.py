"""Approvals (atomic resolve, expiry) and grants, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from agent_core.policy import GrantRule
from agent_core.ports import ApprovalRecord, ApprovalState
from bot.storage import Storage

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


def _approval(
    approval_id: str, created: datetime, ttl: timedelta = timedelta(minutes=10)
) -> ApprovalRecord:
    return ApprovalRecord(
        id=approval_id,
        session_key="main",
        run_id="r1",
        call_id=f"toolu_{approval_id}",
        tool_name="exec",
        action="rm -rf ./build && make all " + "x" * 5000,
        requester="telegram:1",
        created_at=created,
        expires_at=created + ttl,
    )


async def test_create_get_and_chat_ref(storage: Storage, clock: FakeClock) -> None:
    record = _approval("a1", clock.now)
    await storage.create_approval(record)
    assert await storage.get_approval("a1") == record  # the full action, never truncated
    await storage.set_approval_chat_ref("a1", "telegram:1:99")
    stored = await storage.get_approval("a1")
    assert stored is not None and stored.chat_ref == "telegram:1:99"
    assert await storage.get_approval("nope") is None
    assert [a.id for a in await storage.pending_approvals()] == ["a1"]


async def test_resolve_is_one_shot(storage: Storage, clock: FakeClock) -> None:
    await storage.create_approval(_approval("a1", clock.now))
    at = clock.now + timedelta(minutes=1)
    assert await storage.resolve_approval("a1", "once", "telegram:1", at) is True
    assert await storage.resolve_approval("a1", "deny", "telegram:1", at) is False
    stored = await storage.get_approval("a1")
    assert stored is not None
    assert (stored.state, stored.resolved_by, stored.resolved_at) == ("once", "telegram:1", at)
    assert await storage.pending_approvals() == []
    assert await storage.resolve_approval("unknown", "once", "x", at) is False
    with pytest.raises(ValueError):
        await storage.resolve_approval("a1", "pending", None, at)


async def test_concurrent_resolves_exactly_one_wins(storage: Storage, clock: FakeClock) -> None:
    await storage.create_approval(_approval("a1", clock.now))
    at = clock.now + timedelta(seconds=5)
    states: list[ApprovalState] = ["once", "always", "deny", "cancelled"] * 3
    results = await asyncio.gather(
        *(storage.resolve_approval("a1", s, f"who{i}", at) for i, s in enumerate(states))
    )
    assert results.count(True) == 1
    winner = results.index(True)
    stored = await storage.get_approval("a1")
    assert stored is not None
    assert (stored.state, stored.resolved_by) == (states[winner], f"who{winner}")


async def test_decision_after_expiry_is_void(storage: Storage, clock: FakeClock) -> None:
    await storage.create_approval(_approval("a1", clock.now))
    await storage.create_approval(_approval("a2", clock.now))
    late = clock.now + timedelta(minutes=10)
    assert await storage.resolve_approval("a1", "once", "telegram:1", late) is False
    # Cancelling (run stopped) still applies to a due approval.
    assert await storage.resolve_approval("a2", "cancelled", None, late) is True
    stored = await storage.get_approval("a1")
    assert stored is not None and stored.state == "pending"


async def test_expire_due_moves_exactly_the_due_ones(storage: Storage, clock: FakeClock) -> None:
    t0 = clock.now
    await storage.create_approval(_approval("short", t0, timedelta(minutes=1)))
    await storage.create_approval(_approval("exact", t0, timedelta(minutes=2)))
    await storage.create_approval(_approval("long", t0, timedelta(minutes=30)))
    await storage.create_approval(_approval("done", t0, timedelta(minutes=1)))
    assert await storage.resolve_approval("done", "deny", "telegram:1", t0) is True

    now = t0 + timedelta(minutes=2)
    expired = await storage.expire_due(now)
    assert sorted(a.id for a in expired) == ["exact", "short"]
    assert all(a.state == "expired" and a.resolved_at == now for a in expired)
    assert await storage.expire_due(now) == []
    assert [a.id for a in await storage.pending_approvals()] == ["long"]
    done = await storage.get_approval("done")
    assert done is not None and done.state == "deny"


async def test_concurrent_sweepers_never_expire_twice(storage: Storage, clock: FakeClock) -> None:
    for i in range(8):
        await storage.create_approval(_approval(f"a{i}", clock.now, timedelta(seconds=1)))
    now = clock.now + timedelta(minutes=1)
    batches = await asyncio.gather(*(storage.expire_due(now) for _ in range(4)))
    ids = [a.id for batch in batches for a in batch]
    assert sorted(ids) == sorted(f"a{i}" for i in range(8))  # each exactly once


async def test_grant_rules_are_idempotent_and_per_session(storage: Storage) -> None:
    assert await storage.grants("main") == []
    first = await storage.add_grant(GrantRule("main", "exec", "echo harmless"), created_by="telegram:1")
    again = await storage.add_grant(GrantRule("main", "exec", "echo harmless"), created_by="telegram:2")
    assert again == first and first.created_by == "telegram:1"
    await storage.add_grant(GrantRule("main", "write_file", '{"content":"x","path":"a.md"}'))
    await storage.add_grant(GrantRule("group:telegram:1", "web_fetch", '{"url":"https://example.org"}'))
    assert [g.rule.tool_name for g in await storage.grants("main")] == ["exec", "write_file"]
    assert [g.rule.session_key for g in await storage.grants()] == ["main", "main", "group:telegram:1"]
    assert await storage.count_grants("main") == 2


async def test_a_grant_matches_its_exact_input_only(storage: Storage) -> None:
    await storage.add_grant(GrantRule("main", "exec", "echo harmless"))
    assert await storage.has_grant(GrantRule("main", "exec", "echo harmless"))
    for other in ("echo harmless; rm -rf x", "echo  harmless", "echo harmless ", "ECHO harmless", ""):
        assert not await storage.has_grant(GrantRule("main", "exec", other)), other
    assert not await storage.has_grant(GrantRule("dm:telegram:5", "exec", "echo harmless"))
    assert not await storage.has_grant(GrantRule("main", "write_file", "echo harmless"))


async def test_a_long_input_is_a_rule_of_its_own(storage: Storage) -> None:
    long = "printf '%s' " + "x" * 20_000
    await storage.add_grant(GrantRule("main", "exec", long))
    assert await storage.has_grant(GrantRule("main", "exec", long))
    assert not await storage.has_grant(GrantRule("main", "exec", long + "y"))
    [grant] = await storage.grants("main")
    assert grant.rule.input == long  # stored in full, never truncated


async def test_revoke_and_clear(storage: Storage) -> None:
    a = await storage.add_grant(GrantRule("main", "exec", "ls"))
    b = await storage.add_grant(GrantRule("main", "exec", "pwd"))
    await storage.add_grant(GrantRule("group:telegram:1", "web_fetch", "{}"))
    assert await storage.revoke_grant(a.id) == a
    assert await storage.revoke_grant(a.id) is None
    assert not await storage.has_grant(a.rule)
    assert [g.id for g in await storage.grants("main")] == [b.id]
    assert await storage.clear_grants("main") == 1
    assert await storage.grants("main") == []
    assert await storage.count_grants("group:telegram:1") == 1
