"""Channel cursors: per platform channel, the newest message id already taken into the inbox.

A platform whose gateway replays nothing into a new session (Discord) fetches what came
after each cursor at start-up and after a refused RESUME. A cursor is only a lower bound:
one left behind by a crash makes the next catch-up fetch messages again, and the inbox's
seen-update check (kept `prune_seen_updates`' 7 days, longer than the catch-up window)
keeps each of them once.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select

from bot.storage.base import RepositoryBase
from bot.storage.models import ChannelCursorModel


class CursorRepository(RepositoryBase):
    async def channel_cursors(self, platform: str) -> dict[str, str]:
        """Channel id → the newest message id stored from it, for `platform`."""
        async with self._tx() as s:
            rows = await s.execute(
                select(ChannelCursorModel.channel_id, ChannelCursorModel.message_id).where(
                    ChannelCursorModel.platform == platform
                )
            )
            return {channel: message for channel, message in rows}

    async def save_channel_cursors(self, platform: str, cursors: Mapping[str, str]) -> None:
        """Set these channels' cursors (the caller only ever moves one forward)."""
        if not cursors:
            return
        now = self._now()
        rows = [
            {"platform": platform, "channel_id": channel, "message_id": message, "updated_at": now}
            for channel, message in cursors.items()
        ]
        async with self._tx() as s:
            stmt = self._insert(ChannelCursorModel)
            await s.execute(
                stmt.on_conflict_do_update(
                    index_elements=["platform", "channel_id"],
                    set_={"message_id": stmt.excluded.message_id, "updated_at": stmt.excluded.updated_at},
                ),
                rows,
            )
