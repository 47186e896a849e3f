"""Roost's persistence: SQLAlchemy 2 async over SQLite (default) or PostgreSQL.

One facade, `Storage`, carries every repository method directly (it is composed from one
mixin per concern, each in its own module), so callers hold a single object and it
satisfies `agent_core.ports.AgentStore` structurally::

    storage = await Storage.open(settings.database_url)   # engine + Alembic upgrade to head
    ...
    await storage.aclose()

Modules:
    engine.py         create_engine(url): SQLite WAL/foreign keys/busy_timeout, PostgreSQL pool
    writer.py         the hot path's transactions as synchronous bodies: group commit on the
                      event loop (file SQLite; waits go to its thread), or run_sync on the pool
    migrate.py        upgrade(engine) to head in code; head_revision(); current_revision()
    models.py         ORM models (private to this package); schema owned by bot/migrations
    records.py        frozen dataclasses returned by every method; the exception tree
    sessions.py       ensure_session, get_session, new_epoch, set_model; transcript
    runs.py           runs, usage totals, interrupted runs; tool calls
    approvals.py      approvals (atomic resolve, expire_due); grants
    delivery.py       inbound update de-dup; outbound deliveries of streamed replies
    access.py         DM pairing; groups allowed at runtime
    group_context.py  buffer of the newest unmentioned group messages
    facade.py         Storage: the composition and its lifecycle

Contracts that hold for every method: each runs one short transaction; it returns records
(never ORM objects); datetimes in and out are timezone-aware UTC (naive ones are rejected
with ValueError); the current time comes from the injected `clock`.
"""

from __future__ import annotations

from bot.storage.access import MAX_PENDING_PAIRINGS
from bot.storage.engine import create_engine
from bot.storage.facade import Storage
from bot.storage.group_context import GROUP_BUFFER_SIZE
from bot.storage.migrate import current_revision, head_revision, upgrade
from bot.storage.records import (
    DeliveryRow,
    DeliveryState,
    GroupMessage,
    PairedUser,
    PairingCodeInUse,
    PairingRequest,
    RunRow,
    RunStatus,
    SessionRow,
    SessionScope,
    SessionUsage,
    StorageClosed,
    StorageError,
    ToolCallRow,
    TranscriptRow,
    UnknownSession,
)

__all__ = [
    "GROUP_BUFFER_SIZE",
    "MAX_PENDING_PAIRINGS",
    "DeliveryRow",
    "DeliveryState",
    "GroupMessage",
    "PairedUser",
    "PairingCodeInUse",
    "PairingRequest",
    "RunRow",
    "RunStatus",
    "SessionRow",
    "SessionScope",
    "SessionUsage",
    "Storage",
    "StorageClosed",
    "StorageError",
    "ToolCallRow",
    "TranscriptRow",
    "UnknownSession",
    "create_engine",
    "current_revision",
    "head_revision",
    "upgrade",
]
