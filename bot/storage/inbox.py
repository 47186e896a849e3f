"""The inbox: every inbound message is durable before anyone is told "got it".

A row moves `received` (stored with its update id marked seen, in one transaction; not yet
routed) → `queued` (accepted for a session, waiting for a run) → `running` (taken by the
run `run_id`) → `done` (the run's outcome is stored). Messages that are not for a run
(commands, pairing, unmentioned group chatter) are deleted once handled.

Exactly once across a crash: a `running` row whose run appended its user message to the
transcript was answered (or is marked interrupted by the delivery recovery), so it becomes
`done`; a `running` row whose run never got that far goes back to `queued`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from agent_core.inbound import Inbound
from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import InboxModel, MessageModel, SeenUpdateModel

InboxState = Literal["received", "queued", "running", "done"]

DONE_KEPT_FOR = timedelta(days=1)
"""Answered rows are kept this long (for inspection), then pruned at start-up."""
STALE_AFTER = timedelta(days=7)
"""Rows of a platform nobody served for this long are pruned (e.g. a terminal's leftovers)."""


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """What an inbound message needs to be routed again after a restart."""

    platform: str
    chat_kind: str
    chat_id: str
    sender_id: str
    sender_name: str
    text: str
    received_at: datetime
    thread_id: str | None = None
    mentioned: bool = False
    message_id: str | None = None
    update_id: str | None = None

    @classmethod
    def of(cls, inbound: Inbound) -> InboxMessage:
        return cls(
            platform=inbound.platform,
            chat_kind=inbound.chat_kind,
            chat_id=inbound.chat_id,
            sender_id=inbound.sender_id,
            sender_name=inbound.sender_name,
            text=inbound.text,
            received_at=inbound.received_at,
            thread_id=inbound.thread_id,
            mentioned=inbound.mentioned,
            message_id=inbound.message_id,
            update_id=inbound.update_id,
        )

    def inbound(self) -> Inbound:
        return Inbound(
            platform=self.platform,
            chat_kind="group" if self.chat_kind == "group" else "private",
            chat_id=self.chat_id,
            sender_id=self.sender_id,
            sender_name=self.sender_name,
            text=self.text,
            thread_id=self.thread_id,
            mentioned=self.mentioned,
            message_id=self.message_id,
            update_id=self.update_id,
            received_at=self.received_at,
        )


@dataclass(frozen=True, slots=True)
class InboxRow:
    id: int
    message: InboxMessage
    state: InboxState
    session_key: str | None
    run_id: str | None


def _row(m: InboxModel) -> InboxRow:
    message = InboxMessage(
        platform=m.platform,
        chat_kind=m.chat_kind,
        chat_id=m.chat_id,
        sender_id=m.sender_id,
        sender_name=m.sender_name,
        text=m.text,
        received_at=m.received_at,
        thread_id=m.thread_id,
        mentioned=m.mentioned,
        message_id=m.message_id,
        update_id=m.update_id,
    )
    return InboxRow(m.id, message, m.state, m.session_key, m.run_id)  # type: ignore[arg-type]


class InboxRepository(RepositoryBase):
    async def receive_inbound(self, message: InboxMessage) -> int | None:
        """Store the message (`received`) and mark its update seen, in one transaction, so an
        update marked seen always has its message stored. Returns the row id, or None when
        the update was seen before (a redelivery: nothing is stored)."""
        now = self._now()
        async with self._tx() as s:
            if message.update_id is not None:
                seen = await s.execute(
                    self._insert(SeenUpdateModel)
                    .values(platform=message.platform, update_id=message.update_id, seen_at=now)
                    .on_conflict_do_nothing(index_elements=["platform", "update_id"])
                )
                if rowcount(seen) != 1:
                    return None
            row = InboxModel(
                platform=message.platform,
                chat_kind=message.chat_kind,
                chat_id=message.chat_id,
                thread_id=message.thread_id,
                sender_id=message.sender_id,
                sender_name=message.sender_name[:255],
                text=message.text,
                mentioned=message.mentioned,
                message_id=message.message_id,
                update_id=message.update_id,
                state="received",
                received_at=message.received_at,
                updated_at=now,
            )
            s.add(row)
            await s.flush()
            return row.id

    async def queue_inbound(self, inbox_id: int, session_key: str) -> None:
        """The message was accepted for `session_key`: it waits for a run."""
        await self._set_state([inbox_id], "queued", session_key=session_key)

    async def discard_inbound(self, inbox_id: int) -> None:
        """The message was handled without a run (a command, a refusal, group chatter)."""
        async with self._tx() as s:
            await s.execute(
                delete(InboxModel).where(InboxModel.id == inbox_id).execution_options(synchronize_session=False)
            )

    async def take_inbound(self, ids: Sequence[int], run_id: str) -> None:
        """The run `run_id` is about to answer these messages."""
        await self._set_state(ids, "running", run_id=run_id)

    async def finish_inbound(self, ids: Sequence[int]) -> None:
        """The run answering these messages ended and its outcome is stored."""
        await self._set_state(ids, "done")

    async def inbox_rows(self, states: Collection[InboxState] | None = None) -> list[InboxRow]:
        """Rows in the given states (all when None), oldest first."""
        async with self._tx() as s:
            query = select(InboxModel).order_by(InboxModel.id)
            if states is not None:
                query = query.where(InboxModel.state.in_(list(states)))
            return [_row(m) for m in await s.scalars(query)]

    async def recover_inbox(self, platforms: Collection[str]) -> list[InboxRow]:
        """At start-up, before any new message is accepted: settle what a previous process
        left and return the messages still to be handled on `platforms`, oldest first.

        `running` rows whose run stored their user message become `done` (that run was
        answered, or its cut-off reply is marked interrupted); the others go back to
        `queued`. Old answered rows are pruned."""
        now = self._now()
        async with self._tx() as s:
            running = list(await s.scalars(select(InboxModel).where(InboxModel.state == "running")))
            run_ids = {m.run_id for m in running if m.run_id is not None}
            started: set[str] = set()
            if run_ids:
                started = set(
                    await s.scalars(
                        select(MessageModel.run_id)
                        .where(MessageModel.run_id.in_(run_ids), MessageModel.role == "user")
                        .distinct()
                    )
                )
            for m in running:
                if m.run_id in started:
                    m.state = "done"
                else:
                    m.state, m.run_id = "queued", None
                m.updated_at = now
            await s.flush()
            await s.execute(
                delete(InboxModel)
                .where(
                    or_(
                        (InboxModel.state == "done") & (InboxModel.updated_at < now - DONE_KEPT_FOR),
                        InboxModel.received_at < now - STALE_AFTER,
                    )
                )
                .execution_options(synchronize_session=False)
            )
            rows = await s.scalars(
                select(InboxModel)
                .where(InboxModel.state.in_(["received", "queued"]), InboxModel.platform.in_(list(platforms)))
                .order_by(InboxModel.id)
            )
            return [_row(m) for m in rows]

    async def _set_state(
        self, ids: Sequence[int], state: InboxState, *, session_key: str | None = None, run_id: str | None = None
    ) -> None:
        if not ids:
            return
        async with self._tx() as s:
            await self._set_state_in(s, ids, state, session_key=session_key, run_id=run_id)

    async def _set_state_in(
        self,
        s: AsyncSession,
        ids: Sequence[int],
        state: InboxState,
        *,
        session_key: str | None = None,
        run_id: str | None = None,
    ) -> None:
        """`_set_state` inside the caller's transaction."""
        if not ids:
            return
        values: dict[str, object] = {"state": state, "updated_at": self._now()}
        if session_key is not None:
            values["session_key"] = session_key
        if run_id is not None:
            values["run_id"] = run_id
        await s.execute(
            update(InboxModel)
            .where(InboxModel.id.in_(list(ids)))
            .values(**values)
            .execution_options(synchronize_session=False)
        )
