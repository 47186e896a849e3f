"""Who is who, and who may do what with chat commands.

Roles, highest first: owner (ROOST_OWNERS, and whoever sits at the terminal), approver
(ROOST_APPROVERS: may press approval buttons), paired user (approved pairing code, or
`/allow telegram:42`), group member (anyone in a group the configuration or the owner
allowed), stranger (everyone else: gets a pairing code, nothing more).

The owner changes access at runtime — `/allow`, `/revoke` in their private chat, or
`roost access allow|revoke` — through `AccessManager`, which writes every change to the
audit trail. In groups, `GroupCommandPolicy` decides who may use which command.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol

from agent_core.inbound import Inbound
from agent_core.ports import AuditEntry, AuditSink
from bot.commands import Command

log = logging.getLogger(__name__)

PLATFORMS = ("telegram", "discord")


class Role(StrEnum):
    OWNER = "owner"
    APPROVER = "approver"
    PAIRED = "paired user"
    MEMBER = "group member"
    STRANGER = "stranger"


# --- who may use which command in a group ---------------------------------------------------

IsAdmin = Callable[[Inbound], Awaitable[bool]]
"""Whether the sender of a group message is an admin of that group, as the platform says."""


async def no_admins(inbound: Inbound) -> bool:
    """The default while a platform cannot tell us its admins: only the owner counts."""
    return False


class Who(StrEnum):
    ANYONE = "anyone"
    ADMIN = "owner or group admin"
    STARTER = "who asked, owner or group admin"
    OWNER = "owner"


GROUP_COMMAND_RULES: dict[str, Who] = {
    "start": Who.ANYONE,
    "help": Who.ANYONE,
    "status": Who.ANYONE,
    "model": Who.ADMIN,  # showing the model (no argument) is for anyone
    "new": Who.ADMIN,
    "stop": Who.STARTER,
    "usage": Who.ANYONE,  # in a group: that group's figures only
    "queue": Who.ADMIN,
    "retry": Who.ANYONE,  # only re-runs a voice note of this chat that waits for a transcript
    "voice": Who.ADMIN,
}
"""Commands not listed here are the owner's alone in a group."""


class GroupCommandPolicy:
    def __init__(self, is_owner: Callable[[str], bool], is_admin: IsAdmin | None = None) -> None:
        self._is_owner = is_owner
        self._is_admin = is_admin or no_admins

    def rule(self, command: Command) -> Who:
        if command.name == "model" and not command.args:
            return Who.ANYONE
        return GROUP_COMMAND_RULES.get(command.name, Who.OWNER)

    async def refusal(self, command: Command, inbound: Inbound, starters: Collection[str] = ()) -> str | None:
        """None when the sender may use the command in this group; else the reply to give."""
        rule = self.rule(command)
        if rule is Who.ANYONE or self._is_owner(inbound.identity):
            return None
        if rule is Who.STARTER and inbound.identity in starters:
            return None
        if rule is not Who.OWNER and await self._admin(inbound):
            return None
        if rule is Who.STARTER:
            return "Only the person who asked, my owner or this group's admins can stop this answer."
        if rule is Who.ADMIN:
            return f"Only my owner or this group's admins can use /{command.name} here."
        return f"Only my owner can use /{command.name} here."

    async def _admin(self, inbound: Inbound) -> bool:
        try:
            return await self._is_admin(inbound)
        except Exception:  # the platform could not say: refuse rather than guess
            log.warning("roles.admin_check_failed", extra={"platform": inbound.platform}, exc_info=True)
            return False


# --- runtime access management ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccessTarget:
    kind: Literal["user", "group"]
    platform: str
    id: str

    def __str__(self) -> str:
        prefix = "group " if self.kind == "group" else ""
        return f"{prefix}{self.platform}:{self.id}"


def parse_target(text: str) -> AccessTarget:
    """`telegram:42` (a user) or `group telegram:-100123` (a group); ValueError otherwise."""
    words = text.split()
    kind: Literal["user", "group"] = "user"
    if len(words) == 2 and words[0].lower() == "group":
        kind, words = "group", words[1:]
    platform, _, ident = (words[0] if len(words) == 1 else "").partition(":")
    platform = platform.lower()
    ident = ident.strip()
    if platform not in PLATFORMS or not ident or not ident.lstrip("-").isdigit():
        raise ValueError(
            f"{text.strip()!r} is not like 'telegram:42' (a user) or 'group telegram:-100123' (a group)"
        )
    return AccessTarget(kind, platform, ident)


class AccessStore(Protocol):
    async def pair_user(self, platform: str, user_id: str, user_name: str = "") -> bool: ...
    async def unpair_user(self, platform: str, user_id: str) -> bool: ...
    async def allow_group(self, platform: str, chat_id: str) -> bool: ...
    async def disallow_group(self, platform: str, chat_id: str) -> bool: ...
    async def is_paired(self, platform: str, user_id: str) -> bool: ...


class AccessManager:
    """The owner's runtime changes to who may talk to the bot; each one is audited."""

    def __init__(
        self,
        store: AccessStore,
        audit: AuditSink,
        *,
        owners: Collection[str],
        approvers: Collection[str] = (),
        config_groups: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self._store = store
        self._audit = audit
        self.owners = frozenset(owners)
        self.approvers = frozenset(approvers)
        self._config_groups = {p: frozenset(ids) for p, ids in (config_groups or {}).items()}

    def configured_group(self, platform: str, chat_id: str) -> bool:
        groups = self._config_groups.get(platform, frozenset())
        return "*" in groups or chat_id in groups

    async def role_of(self, identity: str) -> Role:
        if identity in self.owners or identity.startswith("console:"):
            return Role.OWNER
        if identity in self.approvers:
            return Role.APPROVER
        platform, _, user_id = identity.partition(":")
        if await self._store.is_paired(platform, user_id):
            return Role.PAIRED
        return Role.STRANGER

    async def allow(self, target: AccessTarget, actor: str) -> str:
        if target.kind == "group":
            changed = await self._store.allow_group(target.platform, target.id)
            reply = f"I'll answer in {target} when mentioned." if changed else f"{target} was already allowed."
        else:
            changed = await self._store.pair_user(target.platform, target.id)
            reply = f"{target} may now talk to me privately." if changed else f"{target} was already paired."
        await self._record(target, actor, "allowed" if changed else "unchanged")
        return reply

    async def revoke(self, target: AccessTarget, actor: str) -> str:
        if target.kind == "group":
            if self.configured_group(target.platform, target.id):
                await self._record(target, actor, "refused", "allowed by configuration")
                return (
                    f"{target} is allowed by the configuration (ROOST_{target.platform.upper()}__ALLOWED_"
                    f"{'GROUPS' if target.platform == 'telegram' else 'CHANNELS'}); remove it there."
                )
            changed = await self._store.disallow_group(target.platform, target.id)
            reply = f"I won't answer in {target} any more." if changed else f"{target} was not allowed."
        else:
            identity = f"{target.platform}:{target.id}"
            if identity in self.owners:
                await self._record(target, actor, "refused", "owner")
                return f"{target} is an owner (ROOST_OWNERS); change that in the configuration."
            changed = await self._store.unpair_user(target.platform, target.id)
            reply = (
                f"{target} can no longer talk to me; a new message from them gets a pairing code."
                if changed
                else f"{target} was not paired."
            )
        await self._record(target, actor, "revoked" if changed else "unchanged")
        return reply

    async def _record(self, target: AccessTarget, actor: str, decision: str, detail: str = "") -> None:
        await self._audit.audit(
            AuditEntry(kind="access", actor=actor, subject=str(target), detail=detail, decision=decision)
        )
