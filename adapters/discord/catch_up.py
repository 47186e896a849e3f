"""Catching up a new Discord gateway session (see adapters.catch_up for the contract).

After every READY of a new session — discord.py dispatches "connect" from it, before any
event of that session — `new_session` closes the gate live messages wait at, waits for the
session's guilds, reads each watched chat's gap (`gap.fetch_gap`), hands its messages to
`take` oldest first, tells the owner what lay beyond the bound, and opens the gate. A newer
session cancels an older one's catch-up (its own covers the same gap); a catch-up that
fails or exceeds `timeout_s` is logged and opens the gate all the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

import discord
from discord.utils import time_snowflake

from adapters.catch_up import CatchUp, ChannelCursors, CursorKeeper, Watched, missed_line
from adapters.discord.gap import fetch_gap

log = logging.getLogger(__name__)

Take = Callable[[discord.Message], Awaitable[None]]


class SessionCatchUp:
    def __init__(
        self, store: ChannelCursors, take: Take, *, now: Callable[[], datetime], bounds: CatchUp, timeout_s: float
    ) -> None:
        self._store, self._take = store, take
        self._now, self._bounds, self._timeout = now, bounds, timeout_s
        self.cursors = CursorKeeper("discord", store)
        self._session_ready = asyncio.Event()
        self._caught_up = asyncio.Event()
        """Clear while a new session catches up: live messages wait, so order holds."""
        self._caught_up.set()
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        await self.cursors.load()

    async def wait(self) -> None:
        """Returns once no catch-up is running (each message it read is with the handler)."""
        await self._caught_up.wait()

    def new_session(self, client: discord.Client) -> asyncio.Task[None]:
        """Start this session's catch-up; the caller owns the task (cancels it at close)."""
        self._session_ready.clear()
        self._caught_up.clear()
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.get_running_loop().create_task(self._run(client), name="discord-catch-up")
        return self._task

    def session_ready(self) -> None:
        """The session's guilds are known (on_ready, or a RESUME before it)."""
        self._session_ready.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.cursors.aclose()

    async def _run(self, client: discord.Client) -> None:
        task = asyncio.current_task()
        try:
            async with asyncio.timeout(self._timeout):
                await self._session_ready.wait()
                await self._fetch_and_take(client)
        except TimeoutError:
            log.warning("discord.catch_up_timed_out after=%ss", self._timeout)
        except Exception:  # live messages must flow again whatever happened here
            log.exception("discord.catch_up_failed")
        finally:
            if self._task is task:
                self._caught_up.set()

    async def _fetch_and_take(self, client: discord.Client) -> None:
        now = self._now()
        self.cursors.release()  # what a failed message held back is read again now
        await self.cursors.refresh()  # where the last leader of the gateway left off (replicas)
        channels = await watched_channels(client, await self._store.watched("discord"))
        fetched: list[discord.Message] = []
        missed: list[str] = []
        for channel_id, channel in channels.items():
            cursor = self.cursors.get(channel_id)
            if cursor is None and isinstance(channel, discord.Thread):
                cursor = self.cursors.get(str(channel.parent_id))  # made since: newer than its channel's cursor
            if cursor is None:  # first seen now: what came before is nobody's gap
                self.cursors.note(channel_id, str(time_snowflake(now)))
                continue
            try:
                gap = await fetch_gap(channel, int(cursor), now, self._bounds)
            except discord.HTTPException as exc:
                log.warning("discord.catch_up_fetch_failed channel=%s: %s", channel_id, exc)
                continue
            fetched.extend(gap.messages)
            if gap.older:
                missed.append(f"{gap.older}{'+' if gap.more else ''} in {place(channel)}")
        fetched.sort(key=lambda m: m.id)
        log.info("discord.catching_up channels=%d messages=%d", len(channels), len(fetched))
        for message in fetched:
            try:
                await self._take(message)
            except Exception:  # as a live message's failure would: logged, the rest still taken
                log.exception("discord.catch_up_message_failed channel=%s message=%s", message.channel.id, message.id)
        if missed:
            await self._store.report_missed("discord", missed_line(missed, self._bounds))


async def watched_channels(client: discord.Client, watched: Watched) -> dict[str, discord.abc.Messageable]:
    """Channel id → channel: the watched users' DMs, the allowed channels (with their
    active threads) and every text channel and thread of an allowed guild."""
    out: dict[str, discord.abc.Messageable] = {}
    for user in sorted(watched.users):
        try:
            dm = await client.create_dm(discord.Object(int(user)))
        except (discord.HTTPException, ValueError) as exc:
            log.warning("discord.catch_up_dm_failed user=%s: %s", user, exc)
            continue
        out[str(dm.id)] = dm
    every_channel, every_guild = "*" in watched.channels, "*" in watched.spaces
    for guild in client.guilds:
        whole = every_channel or every_guild or str(guild.id) in watched.spaces
        for channel in guild.text_channels:
            if whole or str(channel.id) in watched.channels:
                out[str(channel.id)] = channel
        for thread in guild.threads:
            if whole or str(thread.id) in watched.channels or str(thread.parent_id) in watched.channels:
                out[str(thread.id)] = thread
    return out


def place(channel: discord.abc.Messageable) -> str:
    """How the owner's line names a chat."""
    if isinstance(channel, discord.DMChannel):
        return f"the DM with {channel.recipient.name}" if channel.recipient else "a DM"
    return f"#{getattr(channel, 'name', '') or getattr(channel, 'id', '?')}"
