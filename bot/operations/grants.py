"""The texts of 'always allow' rules: listed with ids, revoked by id (and audited)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent_core.approvals import show_controls
from agent_core.grant_binding import binding_note
from agent_core.policy import Grant
from agent_core.ports import AuditEntry

SHOWN_INPUT_CHARS = 300
"""A listing shows this much of each input (the rule itself always holds all of it)."""
CHAT_LISTING = 20
"""/grants shows the newest rules up to this many (a chat message has a size limit)."""


class GrantStore(Protocol):
    async def grants(self, session_key: str | None = None) -> list[Grant]: ...

    async def revoke_grant(self, grant_id: int) -> Grant | None: ...

    async def audit(self, entry: AuditEntry) -> None: ...


def shown_input(grant: Grant) -> str:
    text = show_controls(grant.rule.input)
    if len(text) > SHOWN_INPUT_CHARS:
        text = f"{text[:SHOWN_INPUT_CHARS]}… ({len(grant.rule.input):,} characters)"
    return text


def grant_line(grant: Grant) -> str:
    by = f" by {grant.created_by}" if grant.created_by else ""
    when = grant.created_at.strftime("%Y-%m-%d %H:%M UTC")
    bound = show_controls(binding_note(grant.rule.binding))
    return f"#{grant.id} {grant.rule.session_key} · {grant.rule.tool_name} · {shown_input(grant)}{bound}  ({when}{by})"


def listing(grants: Sequence[Grant], revoke_hint: str, limit: int | None = None) -> str:
    if not grants:
        return "No 'always allow' rules are stored."
    lines = [f"'Always allow' rules ({len(grants)}), each for one session, tool and exact input:"]
    shown = grants if limit is None else grants[-limit:]
    if len(shown) < len(grants):
        lines.append(f"(the newest {len(shown)}; `roost grants list` shows all)")
    lines += [grant_line(g) for g in shown]
    lines.append(revoke_hint)
    return "\n".join(lines)


async def revoke(store: GrantStore, raw_id: str, actor: str) -> str:
    """Delete one rule by id; the answer says what happened."""
    try:
        grant_id = int(raw_id.strip().lstrip("#"))
    except ValueError:
        return f"{raw_id.strip()!r} is not a grant id; the ids are the #numbers in the list."
    grant = await store.revoke_grant(grant_id)
    if grant is None:
        return f"No grant #{grant_id} (already revoked, or reset by /new)."
    await store.audit(
        AuditEntry(
            kind="grant", actor=actor, session_key=grant.rule.session_key, subject=grant.rule.tool_name,
            detail=f"#{grant.id}", decision="revoked",
        )
    )
    return f"Revoked #{grant.id}: {grant.rule.tool_name} in {grant.rule.session_key} will be asked again."
