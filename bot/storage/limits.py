"""What replicas on one PostgreSQL share of the limits: each bucket's window of admitted
messages (messages per minute), who was already told of a refusal in the current window,
and each model's circuit breaker (`agent_core.breaker.BreakerStore`).

A message is admitted under a transaction-level advisory lock per bucket, so replicas
admitting at once never both take the last place in a window. One process on SQLite keeps
these in memory instead (bot.ratelimits.MemoryWindows, a breaker without a store).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.engine import Connection

from agent_core.breaker import SharedState
from bot.leadership import advisory_key
from bot.storage.base import RepositoryBase, dialect_insert, rowcount
from bot.storage.models import AdmittedMessageModel, LimitNoticeModel, ModelBreakerModel

WINDOW = timedelta(minutes=1)

_A = AdmittedMessageModel
_B = ModelBreakerModel
_PRUNE = delete(_A).where(_A.bucket == bindparam("b"), _A.at <= bindparam("until", type_=_A.at.type))
_ADMIT = insert(_A)
_LOAD_BREAKER = select(_B).where(_B.model == bindparam("m"))  # before every model call, with replicas
_LOCK = text("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k ORDER BY k")


@functools.cache
def _nth_newest(buckets: int) -> Any:
    """Per bucket b0, b1, …: the `o<i>`-th newest (0-based) message since `since`; built once
    per bucket count with bound parameters (this is on every message's path)."""
    return select(*(
        select(_A.at).where(_A.bucket == bindparam(f"b{i}"), _A.at > bindparam("since", type_=_A.at.type))
        .order_by(_A.at.desc()).offset(bindparam(f"o{i}")).limit(1).scalar_subquery()
        for i in range(buckets)
    ))  # fmt: skip


def _full_at(conn: Connection, buckets: Sequence[tuple[str, int]], now: datetime) -> list[datetime | None]:
    """Per (bucket, limit): when its window frees a place (its `limit`-th newest message
    leaves it), or None when it has room — in one statement."""
    params: dict[str, Any] = {"since": now - WINDOW}
    for i, (bucket, limit) in enumerate(buckets):
        params[f"b{i}"] = bucket
        params[f"o{i}"] = limit - 1
    row = conn.execute(_nth_newest(len(buckets)), params).one()
    return [at + WINDOW if at is not None else None for at in row]


def _state(row: Any) -> SharedState:
    return SharedState(row.state, row.failures, row.opened_at, row.last_error, row.prober, row.probe_until)


class LimitRepository(RepositoryBase):
    async def windows_full(self, buckets: Sequence[tuple[str, int]], now: datetime) -> list[datetime | None]:
        """Per (bucket, limit): when its window frees a place, or None when it has room."""
        return await self._transact(lambda conn: _full_at(conn, buckets, now)) if buckets else []

    async def admit_messages(self, buckets: Sequence[tuple[str, int]], now: datetime) -> tuple[str, datetime] | None:
        """Count one message against each (bucket, limit), all or none: None when admitted,
        else the first full bucket and when it frees a place (nothing counted)."""
        names = [bucket for bucket, _ in buckets]

        def body(conn: Connection) -> tuple[str, datetime] | None:
            if self._dialect == "postgresql":  # in one order: replicas never deadlock on two buckets
                keys = sorted(advisory_key(f"limit:{bucket}") for bucket in names)
                conn.execute(_LOCK, {"keys": keys})
            for bucket, free_at in zip(names, _full_at(conn, buckets, now), strict=True):
                if free_at is not None:
                    return bucket, free_at
            conn.execute(_PRUNE, [{"b": bucket, "until": now - WINDOW} for bucket in names])  # the window's past
            conn.execute(_ADMIT, [{"bucket": bucket, "at": now} for bucket in names])
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
        row = await self._transact(lambda conn: conn.execute(_LOAD_BREAKER, {"m": model}).first())
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
