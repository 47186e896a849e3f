"""Approvals (with atomic, idempotent resolution and expiry) and per-session tool grants."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update

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

    # -- grants ("Always allow in this session") -------------------------------------------

    async def add_grant(self, session_key: str, tool_name: str) -> None:
        """Idempotent."""
        async with self._tx() as s:
            await s.execute(
                self._insert(GrantModel)
                .values(session_key=session_key, tool_name=tool_name, created_at=self._now())
                .on_conflict_do_nothing(index_elements=["session_key", "tool_name"])
            )

    async def grants(self, session_key: str) -> set[str]:
        async with self._tx() as s:
            rows = await s.scalars(
                select(GrantModel.tool_name).where(GrantModel.session_key == session_key)
            )
            return set(rows)

    async def clear_grants(self, session_key: str) -> int:
        """Forget every 'always allow' of the session (on /new); returns how many."""
        async with self._tx() as s:
            result = await s.execute(
                delete(GrantModel)
                .where(GrantModel.session_key == session_key)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)
