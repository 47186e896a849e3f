"""Context compaction records (agent_core.compaction.CompactionStore): the summary that stands
for a session's first `covered` messages of the current epoch, and failed attempts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from agent_core.compaction import CompactionRecord
from agent_core.text import clean_text
from bot.storage.base import RepositoryBase
from bot.storage.models import CompactionModel, MessageModel
from bot.storage.sessions import EPOCH_OF_SESSION_KEY, current_epoch


# Built once (read at a session's first run): the newest attempt, and the newest success.
_OF_EPOCH = (
    select(*CompactionModel.__table__.columns)
    .where(
        CompactionModel.session_key == bindparam("session_key"),
        CompactionModel.epoch == EPOCH_OF_SESSION_KEY,
    )
    .order_by(CompactionModel.id.desc())
)
_LATEST_ATTEMPT = _OF_EPOCH.limit(1)
_LATEST_OK = _OF_EPOCH.where(CompactionModel.ok.is_(True)).limit(1)


def _record(row: Any) -> CompactionRecord:
    return CompactionRecord(
        row.session_key, row.covered, row.summary, row.tokens_before, row.tokens_after, row.ok,
        row.error, row.forced, row.created_at,
    )  # fmt: skip


class CompactionRepository(RepositoryBase):
    async def compaction_state(self, session_key: str) -> tuple[CompactionRecord | None, CompactionRecord | None]:
        """(latest successful compaction, latest attempt) of the session's current epoch."""
        if session_key in self._no_compactions:
            return None, None  # none ever saved: a new epoch only has fewer
        ticket = self._no_compactions.ticket()
        def body(conn: Connection) -> tuple[Any, Any]:
            params = {"session_key": session_key}
            attempt = conn.execute(_LATEST_ATTEMPT, params).first()
            latest = attempt if attempt is None or attempt.ok else conn.execute(_LATEST_OK, params).first()
            return latest, attempt

        latest, attempt = await self._transact(body)
        if attempt is None:
            self._no_compactions.mark(session_key, ticket)
        return (_record(latest) if latest else None, _record(attempt) if attempt else None)

    async def save_compaction(self, record: CompactionRecord) -> None:
        """Store an attempt; the id of the last message it covers is looked up in the same
        transaction (the `covered`-th message of the current epoch)."""
        try:
            await self._save_compaction(record)
        finally:
            self._no_compactions.forget(record.session_key)  # committed or not: read again

    async def _save_compaction(self, record: CompactionRecord) -> None:
        async with self._tx() as s:
            epoch = await s.scalar(select(current_epoch(record.session_key)))
            covered_id = None
            if record.covered > 0:
                covered_id = await s.scalar(
                    select(MessageModel.id)
                    .where(MessageModel.session_key == record.session_key, MessageModel.epoch == epoch)
                    .order_by(MessageModel.id)
                    .offset(record.covered - 1)
                    .limit(1)
                )
            s.add(
                CompactionModel(
                    session_key=record.session_key, epoch=epoch or 0, covered=record.covered,
                    covered_message_id=covered_id, ok=record.ok, forced=record.forced,
                    summary=clean_text(record.summary), error=clean_text(record.error),
                    tokens_before=record.tokens_before, tokens_after=record.tokens_after,
                    created_at=record.created_at or self._now(),
                )
            )  # fmt: skip
