"""Plain values the storage repositories return (never ORM objects) and the storage errors.

Exceptions::

    StorageError                 base of everything raised on purpose by bot.storage
    ├── StorageClosed            a method was called after Storage.aclose()
    ├── UnknownSession           the session key has no row (call ensure_session first)
    └── PairingCodeInUse         the pairing code collides with a live request on that platform

All datetimes are timezone-aware UTC. Platform ids (chat, user, message, update) are strings,
because Telegram uses integers and Discord snowflakes that do not fit every client's ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from agent_core.events import Usage

SessionScope = Literal["main", "sub"]
RunStatus = Literal["running", "finished", "failed", "cancelled", "interrupted"]
DeliveryState = Literal["streaming", "final", "failed"]


class StorageError(Exception):
    """Base of the errors bot.storage raises deliberately."""


class StorageClosed(StorageError):
    """The Storage was closed; using it again is a programming error."""


class UnknownSession(StorageError, LookupError):
    """No session row for this key."""


class PairingCodeInUse(StorageError):
    """Another live pairing request on the same platform already uses this code."""


@dataclass(frozen=True, slots=True)
class SessionRow:
    key: str
    scope: SessionScope
    epoch: int
    """Incremented by /new; the transcript only shows messages of the current epoch."""
    model_override: str | None
    created_at: datetime
    updated_at: datetime
    platform: str | None = None
    chat_id: str | None = None


@dataclass(frozen=True, slots=True)
class TranscriptRow:
    id: int
    """Monotonic insertion order within the database."""
    session_key: str
    epoch: int
    run_id: str | None
    role: str
    content: list[dict[str, Any]]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    session_key: str
    model: str
    status: RunStatus
    stop_reason: str | None
    turns: int
    usage: Usage
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class SessionUsage:
    """Totals over a session's runs (all epochs), for /status."""

    runs: int
    turns: int
    usage: Usage


@dataclass(frozen=True, slots=True)
class ToolCallRow:
    call_id: str
    run_id: str
    name: str
    input: dict[str, Any]
    output: str | None
    is_error: bool | None
    started_at: datetime
    finished_at: datetime | None
    duration_s: float | None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """One outgoing platform message of a run; `text` is what the platform already shows."""

    run_id: str
    part_index: int
    platform: str
    chat_id: str
    thread_id: str | None
    message_id: str | None
    text: str
    state: DeliveryState
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class PairingRequest:
    platform: str
    user_id: str
    user_name: str
    code: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class PairedUser:
    platform: str
    user_id: str
    user_name: str
    paired_at: datetime


@dataclass(frozen=True, slots=True)
class GroupMessage:
    """An unmentioned group message kept as read-only context for the next mention."""

    session_key: str
    sender: str
    text: str
    at: datetime
