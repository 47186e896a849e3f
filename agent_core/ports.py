"""What the agent core needs from storage, stated as Protocols; `bot.storage` implements them.

Repositories return these plain dataclasses, never ORM objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from agent_core.events import Usage
from agent_core.policy import Grant, GrantRule

ApprovalState = Literal["pending", "once", "always", "deny", "expired", "cancelled"]


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    id: str
    session_key: str
    run_id: str
    call_id: str
    tool_name: str
    action: str
    requester: str
    """Who may decide (owner identity such as "telegram:123", or "owner")."""
    created_at: datetime
    expires_at: datetime
    state: ApprovalState = "pending"
    resolved_by: str | None = None
    resolved_at: datetime | None = None
    chat_ref: str | None = None
    """Adapter-owned pointer to the approval card (e.g. "telegram:<chat>:<message_id>")."""


class TranscriptStore(Protocol):
    async def load_transcript(self, session_key: str) -> list[dict[str, Any]]:
        """Messages of the session's current epoch, oldest first, as Messages API dicts
        ({"role": ..., "content": [blocks]})."""
        ...

    async def append_message(
        self, session_key: str, run_id: str | None, role: str, content: list[dict[str, Any]]
    ) -> None: ...


class RunStore(Protocol):
    async def start_run(
        self, run_id: str, session_key: str, model: str, *, account: str = "", requester: str = ""
    ) -> None: ...

    async def begin_run(
        self, run_id: str, session_key: str, model: str, content: list[dict[str, Any]],
        *, account: str = "", requester: str = "",
    ) -> list[dict[str, Any]]:  # fmt: skip
        """start_run + load_transcript + append_message(user `content`) in one transaction;
        returns the transcript before `content`. `account` (default: the session) and
        `requester` say whose budgets the run counts against."""
        ...

    async def finish_run(
        self,
        run_id: str,
        status: str,
        stop_reason: str,
        turns: int,
        usage: Usage,
        *,
        session_key: str | None = None,
        last_message: list[dict[str, Any]] | None = None,
    ) -> None:
        """With `last_message`, also appends the run's final assistant message, atomically."""
        ...

    async def record_tool_call(
        self, run_id: str, call_id: str, name: str, input: dict[str, Any]
    ) -> None: ...

    async def finish_tool_call(
        self, call_id: str, output: str, is_error: bool, duration_s: float, *, run_id: str | None = None
    ) -> None:
        """Finish the newest unfinished call recorded with `call_id` (in `run_id` when given:
        call ids are unique within a run, but another run may reuse one)."""
        ...


class ApprovalStore(Protocol):
    async def create_approval(self, record: ApprovalRecord) -> None: ...

    async def resolve_approval(
        self, approval_id: str, state: ApprovalState, resolved_by: str | None, at: datetime
    ) -> bool:
        """Atomically move a pending approval to `state`; False if it was not pending."""
        ...

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None: ...

    async def pending_approvals(self) -> list[ApprovalRecord]: ...

    async def set_approval_chat_ref(self, approval_id: str, chat_ref: str) -> None: ...

    async def add_grant(self, rule: GrantRule, *, created_by: str | None = None) -> Grant:
        """'Always allow in this session' for one tool and one exact input. Idempotent:
        an existing rule is returned unchanged."""
        ...

    async def has_grant(self, rule: GrantRule) -> bool: ...

    async def grants(self, session_key: str | None = None) -> list[Grant]:
        """The session's grant rules (every session's when None), oldest first."""
        ...


AuditKind = Literal["tool_call", "access", "pairing", "grant", "rate_limit", "command"]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the audit trail. Text fields hold no secret: callers pass normalised,
    redacted input (the storage side redacts configured secrets once more)."""

    kind: AuditKind
    actor: str
    """Who asked: an identity such as "telegram:123", or "system"."""
    session_key: str | None = None
    subject: str = ""
    """The tool, command or access object the entry is about."""
    detail: str = ""
    """Normalised input, or the reason for a decision."""
    decision: str = ""
    """allow / ask / deny for tool calls; allowed / denied / limited / created / revoked …"""
    approver: str | None = None
    status: str | None = None
    """Result status of a tool call: ok / error / denied / timeout / cancelled."""
    size: int | None = None
    """Characters of the result."""
    duration_s: float | None = None


class AuditSink(Protocol):
    async def audit(self, entry: AuditEntry) -> None:
        """Append an entry. Implementations never raise for a failed write: they log it,
        because an audit failure must not change what the user sees."""
        ...


class AgentStore(TranscriptStore, RunStore, ApprovalStore, Protocol):
    """Everything the core persists."""
