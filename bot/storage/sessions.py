"""Sessions (scope, epoch, model override) and their transcript.

Text is cleaned (`agent_core.text`) before it is written, so the transcript is valid for both
databases (PostgreSQL refuses NUL) and for every later request (no lone surrogates).
"""

from __future__ import annotations

import functools
from typing import Any

from datetime import datetime

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from agent_core.text import clean_json, clean_text
from bot.storage.base import RepositoryBase, dialect_insert
from bot.storage.models import MessageModel, SessionModel
from bot.storage.records import SessionRow, SessionScope, TranscriptRow, UnknownSession


_SELECT_SESSION = select(*SessionModel.__table__.columns).where(SessionModel.key == bindparam("key"))
"""The session's columns as a plain row (attribute names as on SessionModel)."""


def _session_row(m: Any) -> SessionRow:
    return SessionRow(
        key=m.key,
        scope=m.scope,  # type: ignore[arg-type]  # only ever written from SessionScope
        epoch=m.epoch,
        model_override=m.model_override,
        created_at=m.created_at,
        updated_at=m.updated_at,
        platform=m.platform,
        chat_id=m.chat_id,
    )


def current_epoch(session_key: str) -> Any:
    """Scalar subquery: the session's epoch, or 0 when the session has no row yet."""
    return func.coalesce(
        select(SessionModel.epoch).where(SessionModel.key == session_key).scalar_subquery(), 0
    )


# The statements of every run, built once with bound parameters: building and caching a
# fresh SQLAlchemy statement per call cost more CPU than executing it.
_MESSAGES = MessageModel.__table__.c
# The current epoch of the session bound as :session_key (0 before its row exists).
EPOCH_OF_SESSION_KEY = func.coalesce(
    select(SessionModel.epoch).where(SessionModel.key == bindparam("session_key")).scalar_subquery(), 0
)
_INSERT_MESSAGE = insert(MessageModel).values(
    session_key=bindparam("session_key"),
    epoch=EPOCH_OF_SESSION_KEY,
    run_id=bindparam("run_id"),
    role=bindparam("role"),
    content=bindparam("content", type_=_MESSAGES.content.type),
    created_at=bindparam("created_at", type_=_MESSAGES.created_at.type),
)
_SELECT_TRANSCRIPT = (
    select(MessageModel.role, MessageModel.content)
    .where(MessageModel.session_key == bindparam("session_key"), MessageModel.epoch == EPOCH_OF_SESSION_KEY)
    .order_by(MessageModel.id)
)


def insert_message(
    conn: Connection, session_key: str, run_id: str | None, role: str, content: list[dict[str, Any]], now: datetime
) -> None:
    """Append one transcript message to the session's current epoch, text cleaned, inside the
    caller's transaction."""
    params = {"session_key": session_key, "run_id": run_id, "role": role, "content": clean_json(content)}
    conn.execute(_INSERT_MESSAGE, {**params, "created_at": now})


def select_transcript(conn: Connection, session_key: str) -> list[dict[str, Any]]:
    """The session's current epoch as {"role", "content"} dicts, oldest first (plain rows: no
    ORM objects on the hot path of every run), inside the caller's transaction."""
    rows = conn.execute(_SELECT_TRANSCRIPT, {"session_key": session_key})
    return [{"role": role, "content": content} for role, content in rows]


def select_session(conn: Connection, key: str) -> SessionRow | None:
    row = conn.execute(_SELECT_SESSION, {"key": key}).first()
    return None if row is None else _session_row(row)


_SELECT_MODEL_OVERRIDE = select(SessionModel.model_override).where(SessionModel.key == bindparam("key"))


def select_model_override(conn: Connection, key: str) -> str | None:
    return conn.execute(_SELECT_MODEL_OVERRIDE, {"key": key}).scalar()


def ensure_session_row(
    conn: Connection, dialect: str, key: str, scope: SessionScope, platform: str | None, chat_id: str | None,
    now: datetime,
) -> SessionRow:
    """Create the session if absent and return it, inside the caller's transaction. The
    common case, a known session, costs one plain SELECT."""
    known = select_session(conn, key)
    if known is not None:
        return known
    insert_session_if_absent(conn, dialect, key, scope, platform, chat_id, now)
    created = select_session(conn, key)
    assert created is not None
    return created


def insert_session_if_absent(
    conn: Connection, dialect: str, key: str, scope: SessionScope, platform: str | None, chat_id: str | None,
    now: datetime,
) -> None:
    """Create the session unless it exists, inside the caller's transaction: one statement,
    for callers that need the session to exist but not its row (a new chat's first message)."""
    params = {
        "key": key,
        "scope": scope,
        "platform": platform,
        "chat_id": None if chat_id is None else clean_text(chat_id),
        "now": now,
    }
    conn.execute(_insert_session(dialect), params)


@functools.cache
def _insert_session(dialect: str) -> Any:
    """Built once per dialect: a statement built per call cost more than running it."""
    columns = SessionModel.__table__.c
    return (
        dialect_insert(dialect, SessionModel)
        .values(
            key=bindparam("key"),
            scope=bindparam("scope"),
            platform=bindparam("platform"),
            chat_id=bindparam("chat_id"),
            epoch=0,
            created_at=bindparam("now", type_=columns.created_at.type),
            updated_at=bindparam("now", type_=columns.updated_at.type),
        )
        .on_conflict_do_nothing(index_elements=["key"])
    )


class SessionRepository(RepositoryBase):
    async def ensure_session(
        self,
        key: str,
        scope: SessionScope,
        platform: str | None = None,
        chat_id: str | None = None,
    ) -> SessionRow:
        """Create the session if absent and return it. An existing session is returned
        unchanged (its scope, platform and chat are those of its first sighting: `main` is
        shared across platforms)."""
        now = self._now()
        return await self._transact(
            lambda conn: ensure_session_row(conn, self._dialect, key, scope, platform, chat_id, now)
        )

    async def get_session(self, key: str) -> SessionRow | None:
        return await self._transact(lambda conn: select_session(conn, key))

    async def new_epoch(self, key: str) -> SessionRow:
        """Start a fresh conversation (/new): later `load_transcript` calls see only messages
        appended after this; older ones stay stored. Raises UnknownSession."""
        return await self._update_session(key, epoch=SessionModel.epoch + 1)

    async def set_model(self, key: str, model: str | None) -> SessionRow:
        """Pin a model for this session, or None to go back to the configured default.
        Raises UnknownSession."""
        return await self._update_session(key, model_override=None if model is None else clean_text(model))

    async def _update_session(self, key: str, **values: Any) -> SessionRow:
        async with self._tx() as s:
            stmt = (
                update(SessionModel)
                .where(SessionModel.key == key)
                .values(updated_at=self._now(), **values)
                .returning(SessionModel)
                .execution_options(synchronize_session=False)
            )
            row = (await s.execute(stmt)).scalar_one_or_none()
            if row is None:
                raise UnknownSession(key)
            return _session_row(row)

    # -- transcript (agent_core.ports.TranscriptStore) ------------------------------------

    async def append_message(
        self, session_key: str, run_id: str | None, role: str, content: list[dict[str, Any]]
    ) -> None:
        """Append one Messages API message to the session's current epoch."""
        now = self._now()
        await self._transact(lambda conn: insert_message(conn, session_key, run_id, role, content, now))

    async def load_transcript(self, session_key: str) -> list[dict[str, Any]]:
        """The current epoch's messages, oldest first, as {"role", "content"} dicts."""
        return await self._transact(lambda conn: select_transcript(conn, session_key))

    async def transcript_rows(
        self, session_key: str, *, epoch: int | None = None
    ) -> list[TranscriptRow]:
        """Stored rows of one epoch (default: the current one), in insertion order."""
        wanted = current_epoch(session_key) if epoch is None else epoch
        async with self._tx() as s:
            rows = await s.scalars(
                select(MessageModel)
                .where(MessageModel.session_key == session_key, MessageModel.epoch == wanted)
                .order_by(MessageModel.id)
            )
            return [
                TranscriptRow(
                    id=m.id,
                    session_key=m.session_key,
                    epoch=m.epoch,
                    run_id=m.run_id,
                    role=m.role,
                    content=list(m.content),
                    created_at=m.created_at,
                )
                for m in rows
            ]
