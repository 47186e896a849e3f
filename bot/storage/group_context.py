"""The group context buffer: the latest unmentioned messages of a group, read-only context."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, delete, select

from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import GroupMessageModel
from bot.storage.records import GroupMessage

GROUP_BUFFER_SIZE = 50

_NEWEST = (
    select(*GroupMessageModel.__table__.columns)
    .where(GroupMessageModel.session_key == bindparam("session_key"))
    .order_by(GroupMessageModel.id.desc())
    .limit(bindparam("limit"))
)


class GroupContextRepository(RepositoryBase):
    async def add_group_message(
        self, session_key: str, sender: str, text: str, at: datetime, *, keep: int = GROUP_BUFFER_SIZE
    ) -> None:
        """Buffer one message and drop all but the newest `keep` of the session (newest by
        arrival order, not by `at`: platform clocks may disagree)."""
        try:
            await self._add_group_message(session_key, sender, text, at, keep)
        finally:
            self._no_group_messages.forget(session_key)  # committed or not: read again

    async def _add_group_message(self, session_key: str, sender: str, text: str, at: datetime, keep: int) -> None:
        async with self._tx() as s:
            await s.execute(
                self._insert(GroupMessageModel).values(
                    session_key=session_key, sender=sender, text=text, at=at
                )
            )
            keep = (
                select(GroupMessageModel.id)
                .where(GroupMessageModel.session_key == session_key)
                .order_by(GroupMessageModel.id.desc())
                .limit(keep)
            )
            await s.execute(
                delete(GroupMessageModel)
                .where(
                    GroupMessageModel.session_key == session_key,
                    GroupMessageModel.id.not_in(keep.scalar_subquery()),
                )
                .execution_options(synchronize_session=False)
            )

    async def recent_group_messages(
        self, session_key: str, limit: int = GROUP_BUFFER_SIZE
    ) -> list[GroupMessage]:
        """Up to `limit` newest buffered messages, returned oldest first (reading order)."""
        if session_key in self._no_group_messages:
            return []  # nothing buffered since the last read found none (or a clear)
        ticket = self._no_group_messages.ticket()
        params = {"session_key": session_key, "limit": limit}
        rows = await self._transact(lambda conn: conn.execute(_NEWEST, params).all())
        if not rows and limit > 0:
            self._no_group_messages.mark(session_key, ticket)
        return [GroupMessage(m.session_key, m.sender, m.text, m.at) for m in reversed(rows)]

    async def clear_group_messages(self, session_key: str) -> int:
        """Empty the session's buffer (e.g. once a mention consumed it); returns the count."""
        async with self._tx() as s:
            result = await s.execute(
                delete(GroupMessageModel)
                .where(GroupMessageModel.session_key == session_key)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)
