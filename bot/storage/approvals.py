"""Approvals (with atomic, idempotent resolution and expiry) and grant rules (session + tool +
exact input)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update

from agent_core.policy import Grant, GrantRule
from agent_core.ports import ApprovalRecord, ApprovalState
from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import ApprovalModel, GrantModel

# Outcomes that are a decision about the action; a decision arriving after expires_at is void.
_DECISIONS: frozenset[str] = frozenset({"once", "always", "deny"})


def _approval_record(m: ApprovalModel) -> ApprovalRecord:
    return ApprovalRecord(
        id=m.id,
        session_key=m.session_key,
        run_id=m.run_id,
        call_id=m.call_id,
        tool_name=m.tool_name,
        action=m.action,
        requester=m.requester,
        created_at=m.created_at,
        expires_at=m.expires_at,
        state=m.state,  # type: ignore[arg-type]  # only ever written from ApprovalState
        resolved_by=m.resolved_by,
        resolved_at=m.resolved_at,
        chat_ref=m.chat_ref,
    )


class ApprovalRepository(RepositoryBase):
    async def create_approval(self, record: ApprovalRecord) -> None:
        """Store a new approval; raises IntegrityError if the id exists."""
        async with self._tx() as s:
            s.add(
                ApprovalModel(
                    id=record.id,
                    session_key=record.session_key,
                    run_id=record.run_id,
                    call_id=record.call_id,
                    tool_name=record.tool_name,
                    action=record.action,
                    requester=record.requester,
                    created_at=record.created_at,
                    expires_at=record.expires_at,
                    state=record.state,
                    resolved_by=record.resolved_by,
                    resolved_at=record.resolved_at,
                    chat_ref=record.chat_ref,
                )
            )

    async def resolve_approval(
        self, approval_id: str, state: ApprovalState, resolved_by: str | None, at: datetime
    ) -> bool:
        """Atomically move a pending approval to `state`; True only for the one call that
        did it. False when it is unknown, already resolved, or — for a decision
        (once/always/deny) — already past `expires_at` at `at` (expiry wins the race even
        before `expire_due` has swept it). `expired`/`cancelled` apply regardless of time."""
        if state == "pending":
            raise ValueError("cannot resolve an approval to 'pending'")
        conditions = [ApprovalModel.id == approval_id, ApprovalModel.state == "pending"]
        if state in _DECISIONS:
            conditions.append(ApprovalModel.expires_at > at)
        async with self._tx() as s:
            # A single conditional UPDATE: the database serialises concurrent callers on the
            # row, and the loser's WHERE no longer matches, so its rowcount is 0.
            result = await s.execute(
                update(ApprovalModel)
                .where(*conditions)
                .values(state=state, resolved_by=resolved_by, resolved_at=at)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result) == 1

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        async with self._tx() as s:
            row = await s.get(ApprovalModel, approval_id)
            return None if row is None else _approval_record(row)

    async def pending_approvals(self) -> list[ApprovalRecord]:
        """Every approval still pending (including ones past due not yet expired), oldest
        first; at start these are the cards to re-show or expire."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(ApprovalModel)
                .where(ApprovalModel.state == "pending")
                .order_by(ApprovalModel.created_at, ApprovalModel.id)
            )
            return [_approval_record(m) for m in rows]

    async def set_approval_chat_ref(self, approval_id: str, chat_ref: str) -> None:
        async with self._tx() as s:
            await s.execute(
                update(ApprovalModel)
                .where(ApprovalModel.id == approval_id)
                .values(chat_ref=chat_ref)
                .execution_options(synchronize_session=False)
            )

    async def expire_due(self, now: datetime) -> list[ApprovalRecord]:
        """Atomically move pending approvals with `expires_at <= now` to `expired` and return
        exactly those (so each expiry card is edited once, even with concurrent sweepers)."""
        async with self._tx() as s:
            rows = await s.scalars(
                update(ApprovalModel)
                .where(ApprovalModel.state == "pending", ApprovalModel.expires_at <= now)
                .values(state="expired", resolved_at=now)
                .returning(ApprovalModel)
                .execution_options(synchronize_session=False)
            )
            return sorted((_approval_record(m) for m in rows), key=lambda r: r.created_at)

    # -- grants ("Always allow in this session": one session, tool and exact input) ---------

    async def add_grant(self, rule: GrantRule, *, created_by: str | None = None) -> Grant:
        """Store the rule; idempotent (an existing rule is returned as it was). A rule for the
        same input bound to other file contents is replaced: those contents are gone."""
        digest = _rule_hash(rule)
        async with self._tx() as s:
            if rule.binding:
                await s.execute(
                    delete(GrantModel)
                    .where(
                        GrantModel.session_key == rule.session_key,
                        GrantModel.tool_name == rule.tool_name,
                        GrantModel.input == rule.input,
                        GrantModel.binding != rule.binding,
                    )
                    .execution_options(synchronize_session=False)
                )
            await s.execute(
                self._insert(GrantModel)
                .values(
                    session_key=rule.session_key,
                    tool_name=rule.tool_name,
                    input_hash=digest,
                    input=rule.input,
                    binding=rule.binding,
                    created_at=self._now(),
                    created_by=created_by,
                )
                .on_conflict_do_nothing(index_elements=["session_key", "tool_name", "input_hash"])
            )
            row = await s.scalar(select(GrantModel).where(*_rule_matches(rule, digest)))
            assert row is not None
            return _grant(row)

    async def has_grant(self, rule: GrantRule) -> bool:
        """True only for a stored rule with this exact input and binding (the hash finds
        it, the stored values confirm it byte for byte)."""
        async with self._tx() as s:
            row = (
                await s.execute(
                    select(GrantModel.input, GrantModel.binding).where(*_rule_matches(rule, _rule_hash(rule)))
                )
            ).first()
            return row is not None and tuple(row) == (rule.input, rule.binding)

    async def grants(self, session_key: str | None = None) -> list[Grant]:
        """The session's rules (every session's when None), oldest first."""
        query = select(GrantModel).order_by(GrantModel.id)
        if session_key is not None:
            query = query.where(GrantModel.session_key == session_key)
        async with self._tx() as s:
            return [_grant(m) for m in await s.scalars(query)]

    async def count_grants(self, session_key: str) -> int:
        async with self._tx() as s:
            count = await s.scalar(
                select(func.count()).select_from(GrantModel).where(GrantModel.session_key == session_key)
            )
            return int(count or 0)

    async def revoke_grant(self, grant_id: int) -> Grant | None:
        """Delete one rule by id; returns it, or None if there was none."""
        async with self._tx() as s:
            row = await s.get(GrantModel, grant_id)
            if row is None:
                return None
            grant = _grant(row)
            await s.execute(
                delete(GrantModel).where(GrantModel.id == grant_id).execution_options(synchronize_session=False)
            )
            return grant

    async def clear_grants(self, session_key: str) -> int:
        """Forget every 'always allow' of the session (on /new); returns how many."""
        async with self._tx() as s:
            result = await s.execute(
                delete(GrantModel)
                .where(GrantModel.session_key == session_key)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)


def _input_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _rule_hash(rule: GrantRule) -> str:
    """The unique key's hash: of the input alone for an unbound rule (as before 0013)."""
    if not rule.binding:
        return _input_hash(rule.input)
    return _input_hash(f"{rule.input}\x00{rule.binding}")


def _rule_matches(rule: GrantRule, digest: str) -> list[Any]:
    return [
        GrantModel.session_key == rule.session_key,
        GrantModel.tool_name == rule.tool_name,
        GrantModel.input_hash == digest,
    ]


def _grant(m: GrantModel) -> Grant:
    return Grant(
        id=m.id,
        rule=GrantRule(m.session_key, m.tool_name, m.input, m.binding),
        created_at=m.created_at,
        created_by=m.created_by,
    )
