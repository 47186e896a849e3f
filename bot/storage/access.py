"""Who may talk to the bot: DM pairing (request → owner approves → paired) and the groups
the owner allowed at runtime (added to the configured allowlists by the router)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import AllowedGroupModel, PairedUserModel, PairingRequestModel
from bot.storage.records import PairedUser, PairingCodeInUse, PairingRequest

MAX_PENDING_PAIRINGS = 3
"""Live (unexpired) requests per platform; more are refused so strangers cannot flood the
owner with codes."""


@dataclass(frozen=True, slots=True)
class OpenedPairing:
    request: PairingRequest | None
    """None when MAX_PENDING_PAIRINGS requests are already live on the platform."""
    created: bool
    """True only for the call that created the request."""


def _request(m: PairingRequestModel) -> PairingRequest:
    return PairingRequest(
        platform=m.platform,
        user_id=m.user_id,
        user_name=m.user_name,
        code=m.code,
        created_at=m.created_at,
        expires_at=m.expires_at,
    )


class AccessRepository(RepositoryBase):
    async def create_pairing(
        self, platform: str, user_id: str, user_name: str, code: str, expires_at: datetime
    ) -> PairingRequest | None:
        """Open a pairing request and return it, or None when the platform already has
        MAX_PENDING_PAIRINGS live requests. A user with a live request gets that request
        back unchanged (same code), so asking twice never burns a slot. Expired requests
        are dropped here. Raises PairingCodeInUse if `code` is taken by a live request.
        Does not check whether the user is already paired (see is_paired)."""
        opened = await self.open_pairing(platform, user_id, user_name, code, expires_at)
        return opened.request

    async def open_pairing(
        self, platform: str, user_id: str, user_name: str, code: str, expires_at: datetime
    ) -> OpenedPairing:
        """`create_pairing`, also saying whether the request is new: the owner is told about
        a code once, when it is created, however often its stranger writes."""
        now = self._now()
        async with self._tx() as s:
            await self._lock_platform(s, platform)
            await s.execute(
                delete(PairingRequestModel)
                .where(PairingRequestModel.platform == platform)
                .where(PairingRequestModel.expires_at <= now)
                .execution_options(synchronize_session=False)
            )
            existing = await s.scalar(
                select(PairingRequestModel).where(
                    PairingRequestModel.platform == platform,
                    PairingRequestModel.user_id == user_id,
                )
            )
            if existing is not None:
                return OpenedPairing(_request(existing), created=False)
            live = await s.scalar(
                select(func.count()).where(PairingRequestModel.platform == platform)
            )
            if (live or 0) >= MAX_PENDING_PAIRINGS:
                return OpenedPairing(None, created=False)
            result = await s.execute(
                self._insert(PairingRequestModel)
                .values(
                    platform=platform,
                    code=code,
                    user_id=user_id,
                    user_name=user_name,
                    created_at=now,
                    expires_at=expires_at,
                )
                .on_conflict_do_nothing(index_elements=["platform", "code"])
            )
            if rowcount(result) != 1:
                raise PairingCodeInUse(f"pairing code already in use on {platform}")
            return OpenedPairing(PairingRequest(platform, user_id, user_name, code, now, expires_at), created=True)

    async def find_pairing(self, platform: str, code: str) -> PairingRequest | None:
        """The live request with this code (codes compare exactly), or None."""
        async with self._tx() as s:
            row = await s.scalar(
                select(PairingRequestModel).where(
                    PairingRequestModel.platform == platform,
                    PairingRequestModel.code == code,
                    PairingRequestModel.expires_at > self._now(),
                )
            )
            return None if row is None else _request(row)

    async def approve_pairing(self, platform: str, code: str) -> PairedUser | None:
        """Consume the live request with this code and pair its user; None if there is no
        such live request (unknown, expired, or already approved — approving is one-shot)."""
        now = self._now()
        async with self._tx() as s:
            taken = (
                await s.execute(
                    delete(PairingRequestModel)
                    .where(
                        PairingRequestModel.platform == platform,
                        PairingRequestModel.code == code,
                        PairingRequestModel.expires_at > now,
                    )
                    .returning(PairingRequestModel.user_id, PairingRequestModel.user_name)
                    .execution_options(synchronize_session=False)
                )
            ).one_or_none()
            if taken is None:
                return None
            user_id, user_name = taken
            await s.execute(
                self._insert(PairedUserModel)
                .values(platform=platform, user_id=user_id, user_name=user_name, paired_at=now)
                .on_conflict_do_nothing(index_elements=["platform", "user_id"])
            )
            row = await s.get_one(PairedUserModel, (platform, user_id))
            return PairedUser(row.platform, row.user_id, row.user_name, row.paired_at)

    async def is_paired(self, platform: str, user_id: str) -> bool:
        async with self._tx() as s:
            return await s.get(PairedUserModel, (platform, user_id)) is not None

    async def list_pending_pairings(self) -> list[PairingRequest]:
        """Live requests on all platforms, oldest first."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(PairingRequestModel)
                .where(PairingRequestModel.expires_at > self._now())
                .order_by(PairingRequestModel.created_at, PairingRequestModel.platform)
            )
            return [_request(m) for m in rows]

    async def _lock_platform(self, s: AsyncSession, platform: str) -> None:
        # Count-then-insert must not interleave between two requesters, or both could take
        # the last slot. SQLite's BEGIN IMMEDIATE already serialises writers; PostgreSQL at
        # READ COMMITTED needs a lock, held until this transaction ends.
        if self._dialect == "postgresql":
            await s.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                {"k": f"roost.pairing:{platform}"},
            )

    # -- groups allowed at runtime ----------------------------------------------------------

    async def allow_group(self, platform: str, chat_id: str) -> bool:
        """Allow a group; True if it was not allowed before."""
        async with self._tx() as s:
            result = await s.execute(
                self._insert(AllowedGroupModel)
                .values(platform=platform, chat_id=chat_id, added_at=self._now())
                .on_conflict_do_nothing(index_elements=["platform", "chat_id"])
            )
            return rowcount(result) == 1

    async def disallow_group(self, platform: str, chat_id: str) -> bool:
        """Withdraw a runtime permission; True if there was one. Groups allowed by
        configuration stay allowed (they are not stored here)."""
        async with self._tx() as s:
            result = await s.execute(
                delete(AllowedGroupModel)
                .where(AllowedGroupModel.platform == platform, AllowedGroupModel.chat_id == chat_id)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result) == 1

    async def is_group_allowed(self, platform: str, chat_id: str) -> bool:
        async with self._tx() as s:
            return await s.get(AllowedGroupModel, (platform, chat_id)) is not None

    async def allowed_groups(self, platform: str) -> set[str]:
        async with self._tx() as s:
            rows = await s.scalars(
                select(AllowedGroupModel.chat_id).where(AllowedGroupModel.platform == platform)
            )
            return set(rows)

    # -- runtime access management (roost access, /allow, /revoke) ---------------------------

    async def pair_user(self, platform: str, user_id: str, user_name: str = "") -> bool:
        """Let a user talk to the bot without a pairing code; True if they were not paired."""
        async with self._tx() as s:
            result = await s.execute(
                self._insert(PairedUserModel)
                .values(platform=platform, user_id=user_id, user_name=user_name, paired_at=self._now())
                .on_conflict_do_nothing(index_elements=["platform", "user_id"])
            )
            return rowcount(result) == 1

    async def unpair_user(self, platform: str, user_id: str) -> bool:
        """Withdraw a paired user's access (and any pairing request they left); True if
        they were paired. Their next message is treated as a stranger's."""
        async with self._tx() as s:
            await s.execute(
                delete(PairingRequestModel)
                .where(PairingRequestModel.platform == platform, PairingRequestModel.user_id == user_id)
                .execution_options(synchronize_session=False)
            )
            result = await s.execute(
                delete(PairedUserModel)
                .where(PairedUserModel.platform == platform, PairedUserModel.user_id == user_id)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result) == 1

    async def paired_users(self) -> list[PairedUser]:
        """Every paired user on every platform, in pairing order."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(PairedUserModel).order_by(PairedUserModel.paired_at, PairedUserModel.user_id)
            )
            return [PairedUser(m.platform, m.user_id, m.user_name, m.paired_at) for m in rows]

    async def runtime_groups(self) -> list[tuple[str, str, datetime]]:
        """(platform, chat id, allowed at) of every group allowed at runtime, oldest first."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(AllowedGroupModel).order_by(AllowedGroupModel.added_at, AllowedGroupModel.chat_id)
            )
            return [(m.platform, m.chat_id, m.added_at) for m in rows]
