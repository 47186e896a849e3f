"""State of the fake Discord: users, channels, messages, interactions and every REST call.

Everything is guarded by one condition (the server runs in its own thread); tests read it
through `FakeDiscord`'s accessors and wait with `await_for`, which wakes on every change.
Payload builders here produce the JSON shapes Discord's API v10 sends.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

T = TypeVar("T")

_EPOCH_MS = 1420070400000
_counter = itertools.count(1)


def snowflake(at: datetime | None = None) -> str:
    """A fresh, increasing snowflake (ms since Discord's epoch << 22, plus a counter); `at`
    dates it (a message written in the past)."""
    now_ms = int((at or datetime.now(UTC)).timestamp() * 1000) - _EPOCH_MS
    return str((now_ms << 22) | (next(_counter) & 0x3FFFFF))


def snowflake_time(snowflake_id: str) -> datetime:
    return datetime.fromtimestamp(((int(snowflake_id) >> 22) + _EPOCH_MS) / 1000, UTC)


def iso_now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Call:
    """One REST request as the fake saw it."""

    method: str
    path: str
    """Without the API prefix, e.g. "/channels/5/messages"."""
    json: dict[str, Any]
    status: int
    at: float
    """The fake's monotonic clock when the request arrived."""
    authorized: bool


@dataclass
class StoredMessage:
    id: str
    channel_id: str
    author_id: str
    content: str
    components: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    allowed_mentions: dict[str, Any] | None = None
    flags: int = 0
    edits: int = 0
    deleted: bool = False
    reference: str | None = None
    nonce: str | None = None
    mentions: list[str] = field(default_factory=list)
    """User ids the message mentions (Discord resolves them into `mentions`)."""

    @property
    def custom_ids(self) -> dict[str, str]:
        """label → custom_id of the message's buttons."""
        return {
            c.get("label", ""): c.get("custom_id", "")
            for row in self.components
            for c in row.get("components", [])
        }


@dataclass
class Channel:
    id: str
    type: int
    """0 guild text, 1 DM, 11 public thread."""
    guild_id: str | None = None
    parent_id: str | None = None
    recipient_id: str | None = None
    name: str = "general"


@dataclass
class Interaction:
    id: str
    token: str
    channel_id: str
    user_id: str
    created: float
    message_id: str | None = None
    responses: list[dict[str, Any]] = field(default_factory=list)
    """Every callback accepted, in order (type and data)."""
    rejected: list[int] = field(default_factory=list)
    """Discord error codes of callbacks refused (10062 late, 40060 twice)."""
    followups: list[dict[str, Any]] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        return bool(self.responses)


class State:
    """The fake's world; all mutation under `cond`, which notifies async waiters."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, Channel] = {}
        self.guilds: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, StoredMessage] = {}
        self.uploads: dict[str, bytes] = {}
        """The exact bytes of every file the bot uploaded, by attachment id (the message's
        `attachments` keep a text copy, JSON-safe)."""
        self.order: list[str] = []
        self.calls: list[Call] = []
        self.interactions: dict[str, Interaction] = {}
        self.commands: list[dict[str, Any]] = []
        self.unsuppressed: list[str] = []
        """Requests refused for lacking `allowed_mentions` that suppresses pings."""
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def changed(self) -> None:
        with self.cond:
            self.cond.notify_all()
            for loop, event in list(self._async_waiters):
                loop.call_soon_threadsafe(event.set)

    async def await_for(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until `predicate()` is truthy (re-checked on every change); its value."""
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        deadline = loop.time() + timeout
        with self.cond:
            self._async_waiters.append(waiter)
        try:
            while True:
                waiter[1].clear()
                with self.cond:
                    value = predicate()
                if value:
                    return value
                if loop.time() >= deadline:
                    raise TimeoutError(f"condition not met within {timeout:g} s; last calls: {self.calls[-5:]}")
                try:
                    async with asyncio.timeout_at(deadline):
                        await waiter[1].wait()
                except TimeoutError:
                    pass
        finally:
            with self.cond:
                self._async_waiters.remove(waiter)

    # -- payloads ------------------------------------------------------------------

    def user_payload(self, user_id: str) -> dict[str, Any]:
        return dict(self.users[user_id])

    def channel_payload(self, channel: Channel) -> dict[str, Any]:
        data: dict[str, Any] = {"id": channel.id, "type": channel.type, "name": channel.name}
        if channel.guild_id:
            data.update(guild_id=channel.guild_id, position=0, permission_overwrites=[], nsfw=False)
        if channel.parent_id:
            data["parent_id"] = channel.parent_id
        if channel.type == 11:
            data.update(
                owner_id=next(iter(self.users)),
                thread_metadata={
                    "archived": False, "auto_archive_duration": 1440,
                    "archive_timestamp": iso_now(), "locked": False,
                },
                message_count=0, member_count=1, rate_limit_per_user=0,
            )
        if channel.type == 1 and channel.recipient_id:
            data["recipients"] = [self.user_payload(channel.recipient_id)]
        return data

    def message_payload(self, message: StoredMessage, *, nest: bool = True) -> dict[str, Any]:
        channel = self.channels.get(message.channel_id)
        data: dict[str, Any] = {
            "id": message.id,
            "channel_id": message.channel_id,
            "author": self.user_payload(message.author_id),
            "content": message.content,
            "timestamp": snowflake_time(message.id).isoformat(),
            "edited_timestamp": iso_now() if message.edits else None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self.user_payload(u) for u in message.mentions if u in self.users],
            "mention_roles": [],
            "attachments": message.attachments,
            "embeds": [],
            "pinned": False,
            "type": 0 if message.reference is None else 19,
            "flags": message.flags,
            "components": message.components,
        }
        if channel is not None and channel.guild_id:
            data["guild_id"] = channel.guild_id
        if message.reference is not None:
            data["message_reference"] = {"message_id": message.reference, "channel_id": message.channel_id}
            replied = self.messages.get(message.reference)
            if replied is not None and nest:  # Discord resolves one level
                data["referenced_message"] = self.message_payload(replied, nest=False)
        return data
