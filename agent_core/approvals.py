"""The approval gate: a risky tool call waits here for a decision made outside the core.

A request is a database row first and a waiting future second, so a decision is resolved
exactly once (the row's atomic state change decides who wins), survives a restart as a row,
and expires into a denial.

With several processes on one database (replicas), the run may wait in another process than
the one a button reaches: `resolve` then hands the decision to that process (`relay`), which
applies it as its own press would (the "Always" rule and the card's wording live there); a
decision nobody takes is applied here, as for a run that is gone. A waiter also re-reads its
row (`recheck`) when told a signal may have been lost.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import unicodedata
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from agent_core.events import ApprovalRequested, ApprovalResolved, Event
from agent_core.grant_binding import binding_note
from agent_core.policy import GrantRule
from agent_core.ports import ApprovalRecord, ApprovalState, ApprovalStore, AuditEntry, AuditSink
from agent_core.scrub import redact_secrets
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
    elsewhere: bool = False
    """Applied by the process where the run waits, which shows the outcome on its card."""


@dataclass(frozen=True, slots=True)
class GateOutcome:
    decision: Decision
    approver: str | None
    """Who pressed the button (None for expiry or cancellation)."""


Emit = Callable[[Event], Awaitable[None]]


class DecisionRelay(Protocol):
    """Other processes serving the same approvals (replicas on one database)."""

    async def decide_elsewhere(
        self, approval_id: str, decision: Decision, by: str, via: str | None
    ) -> ResolveOutcome | None:
        """Have the process whose run waits on `approval_id` apply the decision (its
        `resolve_waiting`); its outcome, or None when no process claims the approval."""
        ...

# Characters that can hide or rearrange what a terminal, a chat client or a text viewer
# shows: C0/C1 controls (\r, \b, ESC sequences), format characters (bidi overrides and
# isolates, zero-width characters, BOM), line/paragraph separators, lone surrogates, spaces
# other than U+0020, and fillers that render as nothing.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs", "Cs"})
_INVISIBLE_EXTRA = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_KEEP = frozenset("\n\t ")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\b": "\\b", "\x0b": "\\v", "\x0c": "\\f"}
_SUSPECT = re.compile(r"[^\x20-\x7e\n\t]")


def show_controls(text: str) -> str:
    """`text` with every character that could hide what will run written as a visible
    escape (\\r, \\x1b, \\u202e, \\u200b …); newlines, tabs and printable text unchanged.

    Applied to every action an approver is shown, so a terminal, a chat card and an attached
    file all display what will actually run."""
    if _SUSPECT.search(text) is None:
        return text
    out = []
    for ch in text:
        if ch in _KEEP or not (
            unicodedata.category(ch) in _INVISIBLE_CATEGORIES or ch in _INVISIBLE_EXTRA
        ):
            out.append(ch)
            continue
        code = ord(ch)
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


class ApprovalGate:
    def __init__(
        self,
        store: ApprovalStore,
        *,
        approvers: Collection[str],
        ttl_s: float = DEFAULT_APPROVAL_TTL_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        audit: AuditSink | None = None,
    ) -> None:
        self._store = store
        self._audit = audit
        self._approvers = frozenset(approvers)
        self._ttl_s = ttl_s
        self._now = now
        self._waiting: dict[str, asyncio.Future[Decision]] = {}
        self._resolvers: dict[str, str | None] = {}
        self._vias: dict[str, str] = {}
        self.listeners: list[Callable[[], None]] = []
        """Called (synchronously, never raising) whenever an approval is created or decided:
        the dashboard's inbox refreshes on it."""
        self._grant_rules: dict[str, GrantRule] = {}
        """What "Always allow" stores for a waiting approval; absent → nothing is stored."""
        self.relay: DecisionRelay | None = None
        """Set when other processes may hold the waiting run (bot.app wires it)."""

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
        grant: GrantRule | None = None,
    ) -> Decision:
        """Persist a pending approval, announce it, and wait for the decision or expiry."""
        outcome = await self.ask(
            session_key=session_key, run_id=run_id, call_id=call_id, tool_name=tool_name,
            risk=risk, action=action, emit=emit, grant=grant,
        )
        return outcome.decision

    async def ask(
        self,
        *,
        session_key: str,
        run_id: str,
        call_id: str,
        tool_name: str,
        risk: Risk,
        action: str,
        emit: Emit,
        grant: GrantRule | None = None,
    ) -> GateOutcome:
        """`request`, also saying who decided. `action` is shown with its control characters
        escaped; `grant` is the rule "Always allow" stores (None: the button grants nothing
        beyond this call, e.g. exec in a group)."""
        action = show_controls(action)
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
        if grant is not None:
            self._grant_rules[record.id] = grant
        try:
            await self._store.create_approval(record)
            self._changed()
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
                self._changed()
            except asyncio.CancelledError:
                await asyncio.shield(self._finish(record.id, Decision.CANCELLED, None))
                self._changed()
                await _emit_quietly(emit, ApprovalResolved(record.id, "cancelled", None))
                raise
            approver = self._resolved_by(record.id)
            await emit(ApprovalResolved(record.id, decision.value, approver, self._vias.get(record.id)))
            return GateOutcome(decision, approver)
        finally:
            self._waiting.pop(record.id, None)
            self._resolvers.pop(record.id, None)
            self._vias.pop(record.id, None)
            self._grant_rules.pop(record.id, None)

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

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a watcher failing must not change a decision
                log.exception("approvals.listener_failed")

    async def resolve(
        self, approval_id: str, decision: Decision, by: str, *, via: str | None = None
    ) -> ResolveResult:
        """Apply a person's decision. Idempotent: a second press changes nothing. `via` says
        where it was made when not on the chat card (the card then says so)."""
        return await self._resolve(approval_id, decision, by, via, relay=True)

    async def resolve_waiting(
        self, approval_id: str, decision: Decision, by: str, via: str | None
    ) -> ResolveOutcome | None:
        """A decision another process relayed: applied if the run waits here, else None."""
        if approval_id not in self._waiting:
            return None
        return (await self._resolve(approval_id, decision, by, via, relay=False)).outcome

    async def recheck(self) -> None:
        """Re-read the rows this process waits on: a decision another process stored (its
        signal lost, or nobody claimed it in time) lets the run go on now."""
        for approval_id, future in list(self._waiting.items()):
            if future.done():
                continue
            record = await self._store.get_approval(approval_id)
            if record is None or record.state == "pending" or future.done():
                continue
            self._resolvers.setdefault(approval_id, record.resolved_by)
            future.set_result(Decision(record.state))

    async def _resolve(
        self, approval_id: str, decision: Decision, by: str, via: str | None, *, relay: bool
    ) -> ResolveResult:
        record = await self._store.get_approval(approval_id)
        if record is None:
            return ResolveResult(ResolveOutcome.UNKNOWN)
        if not self.may_decide(by):
            return ResolveResult(ResolveOutcome.NOT_YOURS, record)
        if record.state != "pending":
            return ResolveResult(ResolveOutcome.ALREADY_DECIDED, record)
        if relay and self.relay is not None and approval_id not in self._waiting:
            # The run waits in another process (or nowhere): that process decides, with its
            # "Always" rule; the row's atomic change still decides who wins.
            outcome = await self.relay.decide_elsewhere(approval_id, decision, by, via)
            if outcome is not None:
                self._changed()
                return ResolveResult(outcome, await self._store.get_approval(approval_id), elsewhere=True)
        rule = self._grant_rules.get(approval_id)
        if decision is Decision.ALWAYS and rule is None:
            # Nothing may be granted here (e.g. exec in a group): record what really holds,
            # so no card claims "always allowed".
            decision = Decision.ONCE
        state: ApprovalState = decision.value  # type: ignore[assignment]
        if not await self._store.resolve_approval(approval_id, state, by, self._now()):
            return ResolveResult(ResolveOutcome.ALREADY_DECIDED, await self._store.get_approval(approval_id))
        if decision is Decision.ALWAYS and rule is not None:
            grant = await self._store.add_grant(rule, created_by=by)
            if self._audit is not None:
                await self._audit.audit(
                    AuditEntry(
                        kind="grant", actor=by, session_key=rule.session_key, subject=rule.tool_name,
                        detail=f"#{grant.id} {redact_secrets(rule.input)}{binding_note(rule.binding)}",
                        decision="created", approver=by,
                    )
                )
        self._resolvers[approval_id] = by
        if via is not None:
            self._vias[approval_id] = via
        self._changed()
        future = self._waiting.get(approval_id)
        if future is not None and not future.done():
            future.set_result(decision)
        return ResolveResult(ResolveOutcome.RESOLVED, await self._store.get_approval(approval_id))

    async def expire_orphans(self, run_ids: Collection[str] | None = None) -> list[ApprovalRecord]:
        """At start-up: approvals left pending by a previous process can never be answered
        (their run is gone), so they are expired and returned for their cards to be edited.
        With `run_ids`, only those runs' (a dead replica's runs, taken over by this one)."""
        expired = []
        for record in await self._store.pending_approvals():
            if record.id in self._waiting or (run_ids is not None and record.run_id not in run_ids):
                continue
            if await self._store.resolve_approval(record.id, "expired", None, self._now()):
                expired.append(record)
        if expired:
            self._changed()
        return expired


async def _emit_quietly(emit: Emit, event: Event) -> None:
    try:
        await emit(event)
    except Exception:  # a renderer failing must not mask the cancellation
        log.exception("approvals.emit_failed")
