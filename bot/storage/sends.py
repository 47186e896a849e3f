"""Scheduled jobs' sends that must survive a restart (bot.scheduling.sends): one row per
send, keyed by what it is (`answer:<run>`, `missed:<job>:<due>`, `report:<key>`), so
recording the same send twice stores it once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import delete, select, update

from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import PendingSendModel

SendState = Literal["pending", "sent", "failed", "unknown"]
"""pending: attempts go on; sent: the chat confirmed it; failed: every attempt was refused;
unknown: it may have arrived and there is no way to find out (never sent again)."""
SendKind = Literal["answer", "notice"]


@dataclass(frozen=True, slots=True)
class SendRow:
    key: str
    job_id: str | None
    kind: SendKind
    platform: str
    chat_id: str
    thread_id: str | None
    text: str
    buttons: tuple[tuple[str, str], ...]
    """(label, action) pairs, on the send's last message."""
    nonce: str
    """The same on every attempt of this send (a platform that dedupes by it posts it once)."""
    attempts: int
    """Attempts that did not deliver it."""
    uncertain_since: datetime | None
    """When an attempt that may have posted (part of) it was made (the first such): the
    next one must look first, and a platform's way of looking may only last so long."""
    state: SendState
    next_at: datetime
    reason: str | None
    created_at: datetime


def _send(m: PendingSendModel) -> SendRow:
    return SendRow(
        m.key, m.job_id, m.kind, m.platform, m.chat_id, m.thread_id, m.text,  # type: ignore[arg-type]
        tuple((str(label), str(action)) for label, action in m.buttons), m.nonce, m.attempts, m.uncertain_since,
        m.state, m.next_at, m.reason, m.created_at,  # type: ignore[arg-type]
    )


class SendRepository(RepositoryBase):
    async def add_send(self, send: SendRow) -> bool:
        """Store `send` unless a send with its key exists; True if stored now."""
        async with self._tx() as s:
            return rowcount(await s.execute(self._insert_send(send))) == 1

    async def get_send(self, key: str) -> SendRow | None:
        async with self._tx() as s:
            row = await s.get(PendingSendModel, key)
            return None if row is None else _send(row)

    async def prune_sends(self, older_than: timedelta = timedelta(days=7)) -> int:
        """Forget sends that ended before now - older_than (a key is only needed to store a
        send once while it may still be recorded again: moments after a crash)."""
        cutoff = self._now() - older_than
        async with self._tx() as s:
            result = await s.execute(
                delete(PendingSendModel)
                .where(PendingSendModel.state != "pending", PendingSendModel.updated_at < cutoff)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)

    async def pending_sends(self) -> list[SendRow]:
        async with self._tx() as s:
            rows = await s.scalars(
                select(PendingSendModel).where(PendingSendModel.state == "pending").order_by(PendingSendModel.next_at)
            )
            return [_send(m) for m in rows]

    async def send_attempted(
        self, key: str, *, state: SendState, attempts: int, uncertain_since: datetime | None, next_at: datetime,
        reason: str | None,
        follow_up: SendRow | None = None,
    ) -> None:
        """Record an attempt's outcome; `follow_up` (e.g. the owner's report of a send that
        ended undelivered) is stored in the same transaction, so it is never lost between."""
        async with self._tx() as s:
            await s.execute(
                update(PendingSendModel)
                .where(PendingSendModel.key == key)
                .values(state=state, attempts=attempts, uncertain_since=uncertain_since, next_at=next_at, reason=reason,
                        updated_at=self._now())
            )
            if follow_up is not None:
                await s.execute(self._insert_send(follow_up))

    def _insert_send(self, send: SendRow) -> Any:
        return (
            self._insert(PendingSendModel)
            .values(
                key=send.key, job_id=send.job_id, kind=send.kind, platform=send.platform, chat_id=send.chat_id,
                thread_id=send.thread_id, text=send.text, buttons=[list(b) for b in send.buttons],
                nonce=send.nonce, attempts=send.attempts, uncertain_since=send.uncertain_since, state=send.state,
                next_at=send.next_at, reason=send.reason, created_at=send.created_at, updated_at=self._now(),
            )
            .on_conflict_do_nothing(index_elements=["key"])
        )
