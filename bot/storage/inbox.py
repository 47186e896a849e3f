"""The inbox: every inbound message is durable before anyone is told "got it".

A row moves `received` (stored with its update id marked seen, in one transaction; not yet
routed) → `queued` (accepted for a session, waiting for a run) → `running` (taken by the
run `run_id`) → `done` (the run's outcome is stored). Messages that are not for a run
(commands, pairing, unmentioned group chatter) are deleted once handled.

Exactly once across a crash: a `running` row whose run appended its user message to the
transcript was answered (or is marked interrupted by the delivery recovery), so it becomes
`done`; a `running` row whose run never got that far goes back to `queued`.

With replicas on one PostgreSQL (bot.replicas) a `received` row also names the replica that
stored it (`received_by`), so that a dead replica's unrouted rows can be taken over
(`adopt_inbound`) while a live one's are left to it.
"""

from __future__ import annotations

import functools

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import bindparam, delete, insert, or_, select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncSession

from agent_core.inbound import Attachment, Inbound
from bot.storage.base import RepositoryBase, dialect_insert, rowcount
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
    attachments: tuple[Attachment, ...] = ()
    album_id: str | None = None

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
            attachments=inbound.attachments,
            album_id=inbound.album_id,
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
            attachments=self.attachments,
            album_id=self.album_id,
        )


@dataclass(frozen=True, slots=True)
class InboxRow:
    id: int
    message: InboxMessage
    state: InboxState
    session_key: str | None
    run_id: str | None


@dataclass(frozen=True, slots=True)
class SessionQueue:
    """A session's queue as one statement saw it (bot.replicas): its `queued` rows and the
    `received` (not yet routed) rows of its chats that are older than the newest of them —
    rows that may still join the session and must not be overtaken."""

    queued: list[InboxRow]
    unrouted: list[InboxRow]


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
        **_media_of(m.media),
    )
    return InboxRow(m.id, message, m.state, m.session_key, m.run_id)  # type: ignore[arg-type]


def _media_of(stored: Any) -> dict[str, Any]:
    """The inbox row's `media` JSON (None for a plain text message) as InboxMessage fields."""
    if not isinstance(stored, dict):
        return {}
    files = stored.get("attachments")
    album = stored.get("album_id")
    return {
        "attachments": tuple(Attachment.from_json(a) for a in files if isinstance(a, dict)) if isinstance(files, list) else (),
        "album_id": album if isinstance(album, str) else None,
    }


def _media_json(message: InboxMessage) -> dict[str, Any] | None:
    if not message.attachments and message.album_id is None:
        return None
    return {"attachments": [a.to_json() for a in message.attachments], "album_id": message.album_id}


# The statements every message goes through, built once with bound parameters.
_INSERT_INBOX = insert(InboxModel)
_UPDATED_AT = InboxModel.__table__.c.updated_at.type


@functools.cache
def _insert_seen(dialect: str) -> Any:
    return (
        dialect_insert(dialect, SeenUpdateModel)
        .values(
            platform=bindparam("platform"),
            update_id=bindparam("update_id"),
            seen_at=bindparam("seen_at", type_=SeenUpdateModel.__table__.c.seen_at.type),
        )
        .on_conflict_do_nothing(index_elements=["platform", "update_id"])
    )


@functools.cache
def _state_update(with_session: bool, with_run: bool) -> Any:
    values: dict[str, Any] = {"state": bindparam("p_state"), "updated_at": bindparam("p_updated_at", type_=_UPDATED_AT)}
    if with_session:
        values["session_key"] = bindparam("p_session_key")
    if with_run:
        values["run_id"] = bindparam("p_run_id")
    # One row per execution (executemany for several): an expanding IN is re-rendered on
    # every call, which cost more than the update.
    return update(InboxModel).where(InboxModel.id == bindparam("p_id")).values(**values)


def set_inbox_state(
    conn: Connection,
    ids: Sequence[int],
    state: InboxState,
    now: datetime,
    *,
    session_key: str | None = None,
    run_id: str | None = None,
) -> None:
    """Move these inbox rows to `state`, inside the caller's transaction."""
    if not ids:
        return
    params: dict[str, Any] = {"p_state": state, "p_updated_at": now}
    if session_key is not None:
        params["p_session_key"] = session_key
    if run_id is not None:
        params["p_run_id"] = run_id
    rows = [{**params, "p_id": inbox_id} for inbox_id in ids]
    conn.execute(_state_update(session_key is not None, run_id is not None), rows[0] if len(rows) == 1 else rows)


def insert_inbound(
    conn: Connection, dialect: str, message: InboxMessage, now: datetime, received_by: str | None = None
) -> int | None:
    """`receive_inbound`'s transaction body."""
    if message.update_id is not None:
        seen = conn.execute(
            _insert_seen(dialect), {"platform": message.platform, "update_id": message.update_id, "seen_at": now}
        )
        if rowcount(seen) != 1:
            return None
    row = {
        "platform": message.platform,
        "chat_kind": message.chat_kind,
        "chat_id": message.chat_id,
        "thread_id": message.thread_id,
        "sender_id": message.sender_id,
        "sender_name": message.sender_name[:255],
        "text": message.text,
        "mentioned": message.mentioned,
        "message_id": message.message_id,
        "update_id": message.update_id,
        "media": _media_json(message),
        "state": "received",
        "received_by": received_by,
        "received_at": message.received_at,
        "updated_at": now,
    }
    return int(conn.execute(_INSERT_INBOX, row).inserted_primary_key[0])


def _routed_by(received_by: str | None) -> Any:
    """Rows still the replica `received_by`'s to route: stored by it, or adopted by it from
    a dead one (`adopt_inbound` re-stamps them). None is the single process (SQLite), or a
    replica that could not name itself when it stored them."""
    return InboxModel.received_by.is_not_distinct_from(received_by)


def accept_statement(inbox_id: int, received_by: str | None, session_key: str, now: datetime) -> Any:
    """`received` → `queued` for `session_key`, only while the row is still `received_by`'s
    to route (a replica that lost its lock may find another one adopted it meanwhile)."""
    return (
        update(InboxModel)
        .where(InboxModel.id == inbox_id, InboxModel.state == "received", _routed_by(received_by))
        .values(state="queued", session_key=session_key, updated_at=now)
        .execution_options(synchronize_session=False)
    )


def claim_statement(ids: Sequence[int], run_id: str, now: datetime) -> Any:
    """Take the rows among `ids` that no run took yet, returning their ids."""
    return (
        update(InboxModel)
        .where(InboxModel.id.in_(list(ids)), InboxModel.state.in_(["received", "queued"]))
        .values(state="running", run_id=run_id, updated_at=now)
        .returning(InboxModel.id)
        .execution_options(synchronize_session=False)
    )


class InboxRepository(RepositoryBase):
    received_by: str | None = None
    """The replica this process is, stamped on the rows it stores (set by bot.replicas)."""

    async def receive_inbound(self, message: InboxMessage) -> int | None:
        """Store the message (`received`) and mark its update seen, in one transaction, so an
        update marked seen always has its message stored. Returns the row id, or None when
        the update was seen before (a redelivery: nothing is stored)."""
        now, by = self._now(), self.received_by
        return await self._transact(lambda conn: insert_inbound(conn, self._dialect, message, now, by))

    async def queue_inbound(self, inbox_id: int, session_key: str) -> None:
        """The message was accepted for `session_key`: it waits for a run."""
        await self._set_state([inbox_id], "queued", session_key=session_key)

    async def discard_inbound(self, inbox_id: int, *, routed: bool = False) -> None:
        """The message was handled without a run (a command, a refusal, group chatter).
        `routed`: only while the row is still this replica's to route (`route_received`)."""
        query = delete(InboxModel).where(InboxModel.id == inbox_id)
        if routed:
            query = query.where(_routed_by(self.received_by))
        async with self._tx() as s:
            await s.execute(query.execution_options(synchronize_session=False))

    async def route_received(self, inbox_id: int) -> bool:
        """With replicas, before a stored message is routed: whether it is still this
        replica's to route — `received`, stamped by it — and if so, fresh again, so that for
        `orphan_after_s` nobody adopts it (what a replica does while its lock connection is
        down: another one may already have adopted and answered the row)."""
        now = self._now()
        query = (
            update(InboxModel)
            .where(InboxModel.id == inbox_id, InboxModel.state == "received", _routed_by(self.received_by))
            .values(updated_at=now)
            .execution_options(synchronize_session=False)
        )
        return await self._transact(lambda conn: rowcount(conn.execute(query)) == 1)

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
            await _settle_running(s, running, now)
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

    # -- replicas on one PostgreSQL (bot.lane_claims): the inbox is the shared queue ---------

    async def queued_inbound(self, session_key: str) -> list[InboxRow]:
        """The session's messages waiting for a run, oldest first (whichever replica took
        them in)."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(InboxModel)
                .where(InboxModel.session_key == session_key, InboxModel.state == "queued")
                .order_by(InboxModel.id)
            )
            return [_row(m) for m in rows]

    async def session_queue(self, session_key: str) -> SessionQueue:
        """The session's `queued` rows and the unrouted rows that must go before some of them
        (see `SessionQueue`), in one statement, so one snapshot: a row queued after it was
        taken is not in it, and every older row of its chat is (stored before it)."""
        chats = (
            select(InboxModel.platform, InboxModel.chat_id)
            .where(InboxModel.session_key == session_key, InboxModel.state == "queued")
        )
        async with self._tx() as s:
            rows = [
                _row(m)
                for m in await s.scalars(
                    select(InboxModel)
                    .where(
                        or_(
                            (InboxModel.session_key == session_key) & (InboxModel.state == "queued"),
                            (InboxModel.state == "received") & tuple_(InboxModel.platform, InboxModel.chat_id).in_(chats),
                        )
                    )
                    .order_by(InboxModel.id)
                )
            ]
        queued = [r for r in rows if r.state == "queued"]
        newest = queued[-1].id if queued else 0
        return SessionQueue(queued, [r for r in rows if r.state == "received" and r.id < newest])

    async def unrouted_owners(self, before: datetime) -> set[str | None]:
        """The replicas (None: unknown) that stored `received` rows last touched before
        `before`: rows their replica should have routed by now."""
        async with self._tx() as s:
            owners = await s.scalars(
                select(InboxModel.received_by)
                .where(InboxModel.state == "received", InboxModel.updated_at < before)
                .distinct()
            )
            return set(owners)

    async def adopt_inbound(self, owner: str | None, by: str, before: datetime) -> list[InboxRow]:
        """Take over the `received` rows `owner` (a replica gone; None: unknown) stored before
        `before`: they become `by`'s to route, oldest first. Conditional, so of two replicas
        adopting at once each row goes to one."""
        now = self._now()
        stamp = InboxModel.received_by.is_(None) if owner is None else InboxModel.received_by == owner
        async with self._tx() as s:
            ids = list(
                await s.scalars(
                    update(InboxModel)
                    .where(InboxModel.state == "received", InboxModel.updated_at < before, stamp)
                    .values(received_by=by, updated_at=now)
                    .returning(InboxModel.id)
                    .execution_options(synchronize_session=False)
                )
            )
            if not ids:
                return []
            rows = await s.scalars(select(InboxModel).where(InboxModel.id.in_(ids)).order_by(InboxModel.id))
            return [_row(m) for m in rows]

    async def waiting_sessions(self) -> list[str]:
        """Sessions with messages queued or running (the latter maybe on a dead replica)."""
        async with self._tx() as s:
            keys = await s.scalars(
                select(InboxModel.session_key)
                .where(InboxModel.state.in_(["queued", "running"]), InboxModel.session_key.is_not(None))
                .distinct()
            )
            return [k for k in keys if k is not None]

    async def recover_session_inbox(self, session_key: str) -> int:
        """`recover_inbox` for one session whose lane this replica now holds: its `running`
        rows belong to a replica that died holding the lane. Returns how many were settled."""
        now = self._now()
        async with self._tx() as s:
            running = list(
                await s.scalars(
                    select(InboxModel).where(InboxModel.session_key == session_key, InboxModel.state == "running")
                )
            )
            await _settle_running(s, running, now)
            return len(running)

    async def _set_state(
        self, ids: Sequence[int], state: InboxState, *, session_key: str | None = None, run_id: str | None = None
    ) -> None:
        if not ids:
            return
        now = self._now()
        await self._transact(
            lambda conn: set_inbox_state(conn, ids, state, now, session_key=session_key, run_id=run_id)
        )


async def _settle_running(s: AsyncSession, running: list[InboxModel], now: datetime) -> None:
    """Rows a dead process left `running`: those whose run stored its user message were
    answered (or their cut-off reply is marked interrupted) and become `done`; the others go
    back to `queued`, to be answered again."""
    run_ids = {m.run_id for m in running if m.run_id is not None}
    started: set[str] = set()
    if run_ids:
        started = set(
            await s.scalars(
                select(MessageModel.run_id).where(MessageModel.run_id.in_(run_ids), MessageModel.role == "user").distinct()
            )
        )
    for m in running:
        if m.run_id in started:
            m.state = "done"
        else:
            m.state, m.run_id = "queued", None
        m.updated_at = now
