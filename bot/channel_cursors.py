"""`adapters.catch_up.ChannelCursors` over the database: the cursors themselves, which
chats are worth catching up on (the router's owners, paired users, allowed groups and
spaces), and the owner's one line about what a catch-up could not bring back."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from adapters.catch_up import Watched
from agent_core.inbound import ReplyTarget

if TYPE_CHECKING:
    from adapters.base import Adapter
    from bot.router import Router
    from bot.storage import Storage

log = logging.getLogger(__name__)


class StoredCursors:
    def __init__(self, storage: Storage, router: Router, adapters: Mapping[str, Adapter]) -> None:
        self._storage, self._router, self._adapters = storage, router, adapters

    async def load(self, platform: str) -> dict[str, str]:
        return await self._storage.channel_cursors(platform)

    async def save(self, platform: str, cursors: Mapping[str, str]) -> None:
        await self._storage.save_channel_cursors(platform, cursors)

    async def watched(self, platform: str) -> Watched:
        paired = [u.user_id for u in await self._storage.paired_users() if u.platform == platform]
        groups, spaces = await self._router.allowed_places(platform)
        return Watched(frozenset([*self._router.owners_on(platform), *paired]), groups, spaces)

    async def report_missed(self, platform: str, text: str) -> None:
        adapter = self._adapters.get(platform)
        if adapter is None:
            return
        for owner in self._router.owners_on(platform):
            try:
                await adapter.send_text(ReplyTarget(platform, owner), text)
            except Exception:  # the owner may never have opened a chat with the bot
                log.warning("catch_up.report_failed", extra={"platform": platform}, exc_info=True)
