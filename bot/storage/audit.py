"""The audit trail: every tool call and access decision, as append-only rows.

Implements `agent_core.ports.AuditSink`. Every text field passes the redactor before it is
stored — the configured secrets (`use_redactor`, wired by `bot.app`) and, even without
them, anything shaped like a Bot API token or an Anthropic key — so no secret is ever
written here, whatever a tool input contained.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from agent_core.ports import AuditEntry
from agent_core.text import clean_text
from bot.storage.base import RepositoryBase
from bot.storage.models import AuditModel

log = logging.getLogger(__name__)

Redactor = Callable[[str], str]

REDACTED = "[REDACTED]"
MAX_DETAIL_CHARS = 4000
# Shapes of secrets we know even when nobody told us the value: a Telegram bot token
# (digits:35 url-safe characters) and an Anthropic API key.
_SECRET_SHAPES = re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}|\bsk-ant-[A-Za-z0-9_-]{16,}")


def redact_known_shapes(text: str) -> str:
    return _SECRET_SHAPES.sub(REDACTED, text)


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: datetime
    kind: str
    actor: str
    session_key: str | None
    subject: str
    detail: str
    decision: str
    approver: str | None
    status: str | None
    size: int | None
    duration_s: float | None

    def line(self) -> str:
        """One line for people: when (UTC), what, who, about what, outcome."""
        parts = [f"{self.at:%Y-%m-%d %H:%M:%S}", self.kind, self.actor]
        if self.session_key:
            parts.append(f"[{self.session_key}]")
        parts.append(self.subject)
        outcome = self.decision
        if self.status:
            outcome += f"/{self.status}"
        if self.approver:
            outcome += f" by {self.approver}"
        parts.append(f"→ {outcome}")
        if self.size is not None:
            parts.append(f"{self.size:,} chars")
        if self.duration_s is not None:
            parts.append(f"{self.duration_s:.2f} s")
        if self.detail:
            detail = self.detail.replace("\n", " ")
            parts.append(f"· {detail[:120]}{'…' if len(detail) > 120 else ''}")
        return " ".join(p for p in parts if p)


def _row(m: AuditModel) -> AuditRow:
    return AuditRow(
        id=m.id,
        at=m.at,
        kind=m.kind,
        actor=m.actor,
        session_key=m.session_key,
        subject=m.subject,
        detail=m.detail,
        decision=m.decision,
        approver=m.approver,
        status=m.status,
        size=m.size,
        duration_s=m.duration_s,
    )


class AuditRepository(RepositoryBase):
    _audit_redactor: Redactor | None = None

    def use_redactor(self, redact: Redactor) -> None:
        """Redact configured secrets (e.g. `RedactSecrets(settings.secrets).redact`) in
        every stored field, on top of the built-in secret shapes."""
        self._audit_redactor = redact

    def _scrub(self, text: str, limit: int) -> str:
        text = clean_text(text)
        if self._audit_redactor is not None:
            text = self._audit_redactor(text)
        text = redact_known_shapes(text)
        # Cut after redacting: a secret cut in half would no longer match.
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def _scrub_opt(self, text: str | None, limit: int) -> str | None:
        return None if text is None else self._scrub(text, limit)

    async def audit(self, entry: AuditEntry) -> None:
        """Append an entry. Never raises (except cancellation): a failed write is logged,
        because an audit failure must not change what the user sees."""
        try:
            row = AuditModel(
                at=self._now(),
                kind=entry.kind[:16],
                actor=self._scrub(entry.actor, 128),
                session_key=self._scrub_opt(entry.session_key, 255),
                subject=self._scrub(entry.subject, 255),
                detail=self._scrub(entry.detail, MAX_DETAIL_CHARS),
                decision=self._scrub(entry.decision, 32),
                approver=self._scrub_opt(entry.approver, 128),
                status=self._scrub_opt(entry.status, 16),
                size=entry.size,
                duration_s=entry.duration_s,
            )
            async with self._tx() as s:
                s.add(row)
        except Exception:
            log.exception("audit.write_failed", extra={"kind": entry.kind})

    async def audit_entries(
        self,
        *,
        session_key: str | None = None,
        since: datetime | None = None,
        limit: int | None = 20,
        until: datetime | None = None,
        actor: str | None = None,
        subject: str | None = None,
        decision: str | None = None,
        kind: str | None = None,
    ) -> list[AuditRow]:
        """The newest `limit` entries (all when None) matching the filters, oldest first.
        `subject` is the tool's name for tool calls."""
        query = select(AuditModel).order_by(AuditModel.id.desc())
        if session_key is not None:
            query = query.where(AuditModel.session_key == session_key)
        if since is not None:
            query = query.where(AuditModel.at >= since)
        if until is not None:
            query = query.where(AuditModel.at < until)
        for column, value in (
            (AuditModel.actor, actor), (AuditModel.subject, subject), (AuditModel.decision, decision),
            (AuditModel.kind, kind),
        ):
            if value is not None:
                query = query.where(column == value)
        if limit is not None:
            query = query.limit(limit)
        async with self._tx() as s:
            rows = [_row(m) for m in await s.scalars(query)]
        rows.reverse()
        return rows
