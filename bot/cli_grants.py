"""`roost grants list|revoke`, and the text `/grants` answers with in the owner's chat.

A grant is "Always allow in this session" for one session, one tool and one exact input
(and, for a command naming workspace files, their content: "while task.sh is unchanged");
listing shows each with its id, revoking deletes one by id (and is audited)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Protocol

from agent_core.approvals import show_controls
from agent_core.grant_binding import binding_note
from agent_core.policy import Grant
from agent_core.ports import AuditEntry
from bot.settings import Settings

SHOWN_INPUT_CHARS = 300
"""A listing shows this much of each input (the rule itself always holds all of it)."""
CHAT_LISTING = 20
"""/grants shows the newest rules up to this many (a chat message has a size limit)."""


class GrantStore(Protocol):
    async def grants(self, session_key: str | None = None) -> list[Grant]: ...

    async def revoke_grant(self, grant_id: int) -> Grant | None: ...

    async def audit(self, entry: AuditEntry) -> None: ...


def grant_line(grant: Grant) -> str:
    text = show_controls(grant.rule.input)
    if len(text) > SHOWN_INPUT_CHARS:
        text = f"{text[:SHOWN_INPUT_CHARS]}… ({len(grant.rule.input):,} characters)"
    by = f" by {grant.created_by}" if grant.created_by else ""
    when = grant.created_at.strftime("%Y-%m-%d %H:%M UTC")
    bound = show_controls(binding_note(grant.rule.binding))
    return f"#{grant.id} {grant.rule.session_key} · {grant.rule.tool_name} · {text}{bound}  ({when}{by})"


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


async def chat_command(store: GrantStore, args: str, actor: str) -> str:
    """`/grants` lists every session's rules; `/grants revoke ID` removes one."""
    action, _, rest = args.strip().partition(" ")
    if not action or action == "list":
        return listing(await store.grants(), "Revoke one with /grants revoke <id>.", CHAT_LISTING)
    if action == "revoke" and rest.strip():
        return await revoke(store, rest, actor)
    return "Use /grants to list the 'always allow' rules, /grants revoke <id> to remove one."


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    grants = sub.add_parser("grants", help="list or revoke 'always allow' rules")
    grants_sub = grants.add_subparsers(dest="action", required=True)
    listed = grants_sub.add_parser("list", help="list the rules with their ids")
    listed.add_argument("--session", help="only this session key (e.g. main)")
    revoked = grants_sub.add_parser("revoke", help="revoke one rule by id")
    revoked.add_argument("id")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.storage import Storage

    storage = await Storage.open(settings.db_url)
    try:
        if args.action == "list":
            print(listing(await storage.grants(args.session), "Revoke one with: roost grants revoke <id>"))
            return 0
        answer = await revoke(storage, args.id, "cli")
        print(answer, file=sys.stdout if answer.startswith("Revoked") else sys.stderr)
        return 0 if answer.startswith("Revoked") else 1
    finally:
        await storage.aclose()
