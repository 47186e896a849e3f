"""Access control and session choice for each inbound message (DESIGN.md, Data flow 2).

Decides, in this order: owner / paired user / stranger (pairing) for private chats; allowed
group (its chat id, or its Discord guild) and mention gating for groups. Unmentioned group
messages are kept as read-only context for the next mention. Everything refused is logged
with its reason, never silently dropped.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from agent_core.inbound import Inbound
from agent_core.risk import Scope
from bot.session_keys import scope_of, session_key
from bot.storage import Storage
from bot.storage.records import PairingCodeInUse

log = logging.getLogger(__name__)

PAIRING_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O/1/I: read aloud without doubt
PAIRING_CODE_LENGTH = 8
PAIRING_TTL = timedelta(hours=1)
DEFAULT_CONTEXT_KEPT = 50
CONTEXT_KEPT = {"discord": 20}
"""Unmentioned group messages kept as context for the next mention, per platform (Discord
channels are busier and its convention is the last 20)."""
PAIRING_RETELL = timedelta(minutes=5)
"""A stranger who keeps writing is re-told their code at most this often."""
_TOLD_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Accept:
    session_key: str
    scope: Scope
    is_owner: bool


@dataclass(frozen=True, slots=True)
class NeedsPairing:
    code: str | None
    """None when too many codes are pending: the stranger is told to try later."""
    new: bool = False
    """The code was created by this message: the owner is told about it (once per code)."""
    tell_sender: bool = True
    """False when the stranger was told their code moments ago (see PAIRING_RETELL)."""


@dataclass(frozen=True, slots=True)
class Buffered:
    """An unmentioned group message, kept as context for the next mention."""


@dataclass(frozen=True, slots=True)
class Ignored:
    reason: str


Route = Accept | NeedsPairing | Buffered | Ignored


def new_pairing_code() -> str:
    return "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(PAIRING_CODE_LENGTH))


class Router:
    def __init__(
        self,
        storage: Storage,
        *,
        owners: Collection[str],
        allowed_groups: dict[str, Collection[str]],
        allowed_spaces: dict[str, Collection[str]] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._storage = storage
        self.owners = frozenset(owners)
        self._allowed_groups = {p: frozenset(ids) for p, ids in allowed_groups.items()}
        self._allowed_spaces = {p: frozenset(ids) for p, ids in (allowed_spaces or {}).items()}
        """Per platform, the spaces (Discord guilds) all of whose channels are allowed."""
        self._now = now
        self._told: dict[str, datetime] = {}
        """When each stranger was last told about pairing (in memory: a restart re-tells once)."""

    def owners_on(self, platform: str) -> list[str]:
        return [o.partition(":")[2] for o in sorted(self.owners) if o.startswith(f"{platform}:")]

    def is_owner(self, inbound: Inbound) -> bool:
        return self.is_owner_identity(inbound.identity)

    def is_owner_identity(self, identity: str) -> bool:
        """Owners from ROOST_OWNERS; whoever sits at the terminal (`roost chat`) is one too."""
        return identity in self.owners or identity.startswith("console:")

    def statically_allowed(self, inbound: Inbound) -> bool:
        static = self._allowed_groups.get(inbound.platform, frozenset())
        if "*" in static or inbound.chat_id in static:
            return True
        spaces = self._allowed_spaces.get(inbound.platform, frozenset())
        return inbound.space_id is not None and ("*" in spaces or inbound.space_id in spaces)

    async def allowed_places(self, platform: str) -> tuple[frozenset[str], frozenset[str]]:
        """(groups, spaces) answered on `platform`: configured and `/allow`ed groups, allowed
        spaces; "*" means all."""
        groups = self._allowed_groups.get(platform, frozenset()) | await self._storage.allowed_groups(platform)
        return frozenset(groups), self._allowed_spaces.get(platform, frozenset())

    async def group_allowed(self, inbound: Inbound) -> bool:
        if self.statically_allowed(inbound):
            return True
        return await self._storage.is_group_allowed(inbound.platform, inbound.chat_id)

    async def route(self, inbound: Inbound) -> Route:
        owner = self.is_owner(inbound)
        if inbound.chat_kind == "private":
            if owner or await self._storage.is_paired(inbound.platform, inbound.sender_id):
                key = session_key(inbound, is_owner=owner)
                return Accept(key, scope_of(key), owner)
            return await self._pairing(inbound)
        if not await self.group_allowed(inbound):
            log.info("router.group_not_allowed", extra={"platform": inbound.platform, "chat": inbound.chat_id})
            return Ignored("group not allowed")
        key = session_key(inbound, is_owner=owner)
        if not inbound.mentioned:
            await self._storage.add_group_message(
                key, inbound.sender_name, _as_context(inbound), inbound.received_at,
                keep=CONTEXT_KEPT.get(inbound.platform, DEFAULT_CONTEXT_KEPT),
            )
            return Buffered()
        return Accept(key, scope_of(key), owner)

    async def _pairing(self, inbound: Inbound) -> NeedsPairing:
        route = await self._open_pairing(inbound)
        may_tell = self._may_tell(inbound)  # always called: a new code's telling counts too
        return NeedsPairing(route.code, route.new, tell_sender=route.new or may_tell)

    async def _open_pairing(self, inbound: Inbound) -> NeedsPairing:
        for _ in range(5):
            code = new_pairing_code()
            try:
                opened = await self._storage.open_pairing(
                    inbound.platform,
                    inbound.sender_id,
                    inbound.sender_name,
                    code,
                    self._now() + PAIRING_TTL,
                )
            except PairingCodeInUse:  # a collision with another live code: draw again
                continue
            if opened.request is None:
                return NeedsPairing(None)
            return NeedsPairing(opened.request.code, opened.created)
        return NeedsPairing(None)

    def _may_tell(self, inbound: Inbound) -> bool:
        """Whether the stranger may be answered now: each reply is a send the owner's own
        streamed answers wait behind, so a stranger writing fast gets one per PAIRING_RETELL."""
        now = self._now()
        last = self._told.get(inbound.identity)
        if last is not None and now - last < PAIRING_RETELL:
            return False
        if len(self._told) >= _TOLD_MAX:
            self._told = {k: t for k, t in self._told.items() if now - t < PAIRING_RETELL}
        self._told[inbound.identity] = now
        return True


def _as_context(inbound: Inbound) -> str:
    """An unmentioned message as chat context: its text, and what it carried (files are not
    fetched for context: only a message addressed to Roost is)."""
    if not inbound.attachments:
        return inbound.text
    sent = ", ".join(f"a {a.kind}" + (f" ({a.name})" if a.kind == "document" and a.name else "") for a in inbound.attachments)
    return f"{inbound.text} [sent {sent}]".strip()
