"""What replicas on one PostgreSQL share of the limits: each bucket's window of admitted
messages (messages per minute), who was already told of a refusal in the current window,
and each model's circuit breaker (`agent_core.breaker.BreakerStore`).

A message is admitted under a transaction-level advisory lock per bucket, so replicas
admitting at once never both take the last place in a window. One process on SQLite keeps
these in memory instead (bot.ratelimits.MemoryWindows, a breaker without a store).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from agent_core.breaker import SharedState
from bot.leadership import advisory_key
from bot.storage.base import RepositoryBase, dialect_insert, rowcount
from bot.storage.models import AdmittedMessageModel, LimitNoticeModel, ModelBreakerModel

WINDOW = timedelta(minutes=1)

_A = AdmittedMessageModel
_B = ModelBreakerModel


def _full_since(conn: Connection, bucket: str, limit: int, now: datetime) -> datetime | None:
    """When the `limit`-th newest message of the window was admitted, or None (room left)."""
    return conn.execute(
        select(_A.at).where(_A.bucket == bucket, _A.at > now - WINDOW).order_by(_A.at.desc()).offset(limit - 1).limit(1)
    ).scalar()


def _state(row: Any) -> SharedState:
    return SharedState(row.state, row.failures, row.opened_at, row.last_error, row.prober, row.probe_until)


class LimitRepository(RepositoryBase):
    async def window_full(self, bucket: str, limit: int, now: datetime) -> datetime | None:
        """When the bucket's window of `limit` messages frees a place, or None when it has room."""
        at = await self._transact(lambda conn: _full_since(conn, bucket, limit, now))
        return at + WINDOW if at is not None else None

    async def admit_messages(self, buckets: Sequence[tuple[str, int]], now: datetime) -> tuple[str, datetime] | None:
        """Count one message against each (bucket, limit), all or none: None when admitted,
        else the first full bucket and when it frees a place (nothing counted)."""

        def body(conn: Connection) -> tuple[str, datetime] | None:
            if self._dialect == "postgresql":
                for bucket in sorted(b for b, _ in buckets):  # one order: no deadlock between replicas
                    conn.execute(select(func.pg_advisory_xact_lock(advisory_key(f"limit:{bucket}"))))
            for bucket, limit in buckets:
                conn.execute(delete(_A).where(_A.bucket == bucket, _A.at <= now - WINDOW))
                at = _full_since(conn, bucket, limit, now)
                if at is not None:
                    return bucket, at + WINDOW
            conn.execute(insert(_A), [{"bucket": bucket, "at": now} for bucket, _ in buckets])
            return None

        return await self._transact(body)

    async def first_refusal(self, bucket: str, limit: str, until: datetime, now: datetime) -> bool:
        """Whether this refusal is the first of its window (to be told and audited, by
        whichever replica refused it); marks the bucket's `limit` told until `until`."""
        table = LimitNoticeModel.__table__
        stmt = dialect_insert(self._dialect, LimitNoticeModel).values(bucket=bucket, limit_name=limit, told_until=until)
        stmt = stmt.on_conflict_do_update(
            index_elements=["bucket", "limit_name"], set_={"told_until": until}, where=table.c.told_until <= now
        )
        return await self._transact(lambda conn: rowcount(conn.execute(stmt)) == 1)

    # --- agent_core.breaker.BreakerStore ------------------------------------------------
    async def load_breaker(self, model: str) -> SharedState:
        row = await self._transact(lambda conn: conn.execute(select(_B).where(_B.model == model)).first())
        return _state(row) if row is not None else SharedState()

    async def load_breakers(self) -> dict[str, SharedState]:
        rows = await self._transact(lambda conn: conn.execute(select(_B)).all())
        return {row.model: _state(row) for row in rows}

    async def change_breaker(self, model: str, change: Callable[[SharedState], SharedState]) -> SharedState:
        def body(conn: Connection) -> SharedState:
            fresh = asdict(SharedState())
            conn.execute(dialect_insert(self._dialect, _B).values(model=model, **fresh).on_conflict_do_nothing())
            old = _state(conn.execute(select(_B).where(_B.model == model).with_for_update()).one())
            new = change(old)
            if new != old:
                conn.execute(update(_B).where(_B.model == model).values(**asdict(new)))
            return new

        return await self._transact(body)
