"""The approval gate: a risky tool call waits here for a decision made outside the core.

A request is a database row first and a waiting future second, so a decision is resolved
exactly once (the row's atomic state change decides who wins), survives a restart as a row,
and expires into a denial.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from agent_core.events import ApprovalRequested, ApprovalResolved, Event
from agent_core.ports import ApprovalRecord, ApprovalState, ApprovalStore
from agent_core.risk import Risk

log = logging.getLogger(__name__)

DEFAULT_APPROVAL_TTL_S = 600.0


class Decision(StrEnum):
    ONCE = "once"
    ALWAYS = "always"
    DENY = "deny"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def allows(self) -> bool:
        return self in (Decision.ONCE, Decision.ALWAYS)


class ResolveOutcome(StrEnum):
    RESOLVED = "resolved"
    NOT_YOURS = "not_yours"
    ALREADY_DECIDED = "already_decided"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ResolveResult:
    outcome: ResolveOutcome
    record: ApprovalRecord | None = None


Emit = Callable[[Event], Awaitable[None]]


class ApprovalGate:
    def __init__(
        self,
        store: ApprovalStore,
        *,
        approvers: Collection[str],
        ttl_s: float = DEFAULT_APPROVAL_TTL_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self._approvers = frozenset(approvers)
        self._ttl_s = ttl_s
        self._now = now
        self._waiting: dict[str, asyncio.Future[Decision]] = {}
        self._resolvers: dict[str, str | None] = {}

    def may_decide(self, identity: str) -> bool:
        return identity in self._approvers

    async def request(
        self,
        *,
        session_key: str,
        run_id: str,
        call_id: str,
        tool_name: str,
        risk: Risk,
        action: str,
        emit: Emit,
    ) -> Decision:
        """Persist a pending approval, announce it, and wait for the decision or expiry."""
        created = self._now()
        record = ApprovalRecord(
            id=secrets.token_urlsafe(12),
            session_key=session_key,
            run_id=run_id,
            call_id=call_id,
            tool_name=tool_name,
            action=action,
            requester=",".join(sorted(self._approvers)),
            created_at=created,
            expires_at=created + timedelta(seconds=self._ttl_s),
        )
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiting[record.id] = future
        try:
            await self._store.create_approval(record)
            await emit(
                ApprovalRequested(
                    record.id, call_id, tool_name, risk, action, record.expires_at
                )
            )
            try:
                async with asyncio.timeout(self._ttl_s):
                    decision = await asyncio.shield(future)
            except TimeoutError:
                decision = await self._finish(record.id, Decision.EXPIRED, None)
            except asyncio.CancelledError:
                await asyncio.shield(self._finish(record.id, Decision.CANCELLED, None))
                await _emit_quietly(emit, ApprovalResolved(record.id, "cancelled", None))
                raise
            await emit(ApprovalResolved(record.id, decision.value, self._resolved_by(record.id)))
            return decision
        finally:
            self._waiting.pop(record.id, None)
            self._resolvers.pop(record.id, None)

    def _resolved_by(self, approval_id: str) -> str | None:
        return self._resolvers.get(approval_id)

    async def _finish(self, approval_id: str, decision: Decision, by: str | None) -> Decision:
        """Expire or cancel unless a person decided first; return what actually holds."""
        won = await self._store.resolve_approval(approval_id, decision.value, by, self._now())
        if won:
            return decision
        record = await self._store.get_approval(approval_id)
        if record is not None and record.state in ("once", "always"):
            return Decision(record.state)
        return Decision.DENY if record is None else Decision(record.state)

    async def resolve(self, approval_id: str, decision: Decision, by: str) -> ResolveResult:
        """Apply a person's decision. Idempotent: a second press changes nothing."""
        record = await self._store.get_approval(approval_id)
        if record is None:
            return ResolveResult(ResolveOutcome.UNKNOWN)
        if not self.may_decide(by):
            return ResolveResult(ResolveOutcome.NOT_YOURS, record)
        if record.state != "pending":
            return ResolveResult(ResolveOutcome.ALREADY_DECIDED, record)
        state: ApprovalState = decision.value  # type: ignore[assignment]
        if not await self._store.resolve_approval(approval_id, state, by, self._now()):
            return ResolveResult(ResolveOutcome.ALREADY_DECIDED, await self._store.get_approval(approval_id))
        if decision is Decision.ALWAYS:
            await self._store.add_grant(record.session_key, record.tool_name)
        self._resolvers[approval_id] = by
        future = self._waiting.get(approval_id)
        if future is not None and not future.done():
            future.set_result(decision)
        return ResolveResult(ResolveOutcome.RESOLVED, await self._store.get_approval(approval_id))

    async def expire_orphans(self) -> list[ApprovalRecord]:
        """At start-up: approvals left pending by a previous process can never be answered
        (their run is gone), so they are expired and returned for their cards to be edited."""
        expired = []
        for record in await self._store.pending_approvals():
            if record.id in self._waiting:
                continue
            if await self._store.resolve_approval(record.id, "expired", None, self._now()):
                expired.append(record)
        return expired


async def _emit_quietly(emit: Emit, event: Event) -> None:
    try:
        await emit(event)
    except Exception:  # a renderer failing must not mask the cancellation
        log.exception("approvals.emit_failed")
