"""Catching up after a gap: the port through which an adapter keeps, per channel, the newest
message it has handed to the inbox, and the keeper that saves those cursors off the
message path.

For platforms whose gateway replays nothing into a new session (Discord: a new process, or
a RESUME the gateway refused). The adapter fetches what came after each watched channel's
cursor (`Watched`), bounded by `CatchUp` (newest `max_messages`, not older than
`max_age`), and hands it to `InboundHandler.receive` like a live message; the inbox's
seen-update check keeps each message once, however often it is fetched. What lay beyond
the bound is told to the owner in one line (`ChannelCursors.report_missed`).

Invariant: a cursor never passes a message that is not stored — the adapter notes a message
only after `receive` returned for it, and a channel whose `receive` failed is held until the
next session's catch-up reads it again (the inbox keeps what was stored once). Saving lags
behind noting (`CursorKeeper` coalesces a burst into one write); a cursor lost to a crash is
only older, never newer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CatchUp:
    max_messages: int = 100
    max_age: timedelta = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class Watched:
    """What an adapter catches up on: DMs of these users, these channels (with their active
    threads), every channel of these spaces; "*" in channels or spaces means all."""

    users: frozenset[str] = field(default_factory=frozenset)
    channels: frozenset[str] = field(default_factory=frozenset)
    spaces: frozenset[str] = field(default_factory=frozenset)


class ChannelCursors(Protocol):
    """Implemented by the composition root over its database."""

    async def load(self, platform: str) -> dict[str, str]:
        """Channel id → the newest message id handed to the inbox (as saved)."""
        ...

    async def save(self, platform: str, cursors: Mapping[str, str]) -> None:
        """Persist these cursors (each only ever moves forward)."""
        ...

    async def watched(self, platform: str) -> Watched:
        """The owners' and paired users' DMs, the allowed channels and spaces."""
        ...

    async def report_missed(self, platform: str, text: str) -> None:
        """Tell the owner, in one message, what a catch-up could not bring back."""
        ...


class CursorKeeper:
    """Cursors noted in memory, saved by one background task that coalesces bursts.

    `note` never waits on the database; `aclose` saves what is still unsaved. Ids are
    compared as integers (snowflakes grow with time)."""

    def __init__(self, platform: str, store: ChannelCursors) -> None:
        self._platform, self._store = platform, store
        self._cursors: dict[str, str] = {}
        self._dirty: dict[str, str] = {}
        self._held: set[str] = set()
        self._wake = asyncio.Event()
        self._saving = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> dict[str, str]:
        self._cursors = dict(await self._store.load(self._platform))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._save_loop(), name="cursor-keeper")
        return dict(self._cursors)

    async def refresh(self) -> None:
        """Adopt every saved cursor newer than the one in memory: another replica may have
        taken in messages while this one did not hold the connection (adapters.lead)."""
        for channel, message in (await self._store.load(self._platform)).items():
            current = self._cursors.get(channel)
            if current is None or int(message) > int(current):
                self._cursors[channel] = message

    def get(self, channel_id: str) -> str | None:
        return self._cursors.get(channel_id)

    def hold(self, channel_id: str) -> None:
        """A message of this channel may not be stored (the handler failed on it): its
        cursor stays where it is until `release`, so a later message cannot carry it past."""
        self._held.add(channel_id)

    def release(self) -> None:
        """A new session's catch-up reads every channel from its cursor again."""
        self._held.clear()

    def note(self, channel_id: str, message_id: str) -> None:
        if channel_id in self._held:
            return
        current = self._cursors.get(channel_id)
        if current is not None and int(current) >= int(message_id):
            return
        self._cursors[channel_id] = self._dirty[channel_id] = message_id
        self._wake.set()

    async def _save_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    async def flush(self) -> None:
        """Save what is noted now (before another replica reads the cursors)."""
        await self._flush()

    async def _flush(self) -> None:
        async with self._saving:  # one save at a time: an older batch never lands after a newer
            await self._save_batch()

    async def _save_batch(self) -> None:
        batch, self._dirty = self._dirty, {}
        if not batch:
            return
        try:
            await self._store.save(self._platform, batch)
        except BaseException as exc:  # kept for the next try (aclose's too); an old cursor only re-fetches
            for channel, message in batch.items():
                self._dirty.setdefault(channel, message)
            if not isinstance(exc, Exception):
                raise
            log.warning("catch_up.cursor_save_failed", exc_info=True)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._flush()


def missed_line(places: list[str], bounds: CatchUp) -> str:
    """The owner's one line: where messages could not be brought back after a gap."""
    hours = bounds.max_age.total_seconds() / 3600
    return (
        f"While I was offline, messages older than {hours:g} h or beyond the newest "
        f"{bounds.max_messages} per chat were not answered: {'; '.join(places)}. "
        "Ask again if something still matters."
    )
