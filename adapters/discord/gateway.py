"""The gateway session of one Discord client, held by one replica at a time.

Discord dispatches every event to each gateway session of a bot, so replicas that all
connected would each take in every message. With replicas (a `Lead`, adapters.lead) only
the holder opens the session; the others stay logged in for REST — sends, edits, files,
typing all work without a gateway — open it when the lead becomes theirs (the new session's
READY starts the adapter's catch-up, so what was written meanwhile is read from history),
and close it when the lead goes (its lock connection dropped), so two sessions never run
for longer than a lost lock takes to be noticed. `hand_over` (shutting down) closes the
session before it lets the lead go. Without a lead the session is always open.

Closing keeps the client: cancelling discord.py's `connect` loop and closing its websocket
with 1000 (Discord ends the session) leaves the HTTP client to the sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import discord

from adapters.lead import Lead

log = logging.getLogger(__name__)

GATEWAY_ROLE = "discord-gateway"
"""The lead whose holder, alone among replicas, opens the gateway."""


class Gateway:
    def __init__(self, client: discord.Client, lead: Lead | None, *, on_close: Callable[[], Awaitable[None]]) -> None:
        """`on_close` runs after the session closed, before the lead may go (saving the
        channel cursors the next holder's catch-up starts from)."""
        self._client, self._lead, self._on_close = client, lead, on_close
        self.connector: asyncio.Task[None] | None = None
        """discord.py's connect loop while this process holds the session."""
        self._follower: asyncio.Task[None] | None = None

    async def start(self) -> bool:
        """Open the session if this replica leads (one attempt at the lead at once: a lone
        replica leads from the start) and follow the lead from then on; whether it opened."""
        if self._lead is not None:
            await self._lead.start()
        opened = self._lead is None or self._lead.held
        if opened:
            self._open()
        else:
            log.info("discord.gateway_follower: another replica holds the gateway; sending through REST")
        if self._lead is not None:
            self._follower = asyncio.get_running_loop().create_task(self._follow(self._lead), name="discord-gateway-lead")
        return opened

    def _open(self) -> None:
        # discord.py reconnects and RESUMEs by itself; a new session's READY starts the catch-up.
        self.connector = asyncio.get_running_loop().create_task(self._client.connect(reconnect=True), name="discord-gateway")
        self.connector.add_done_callback(_ended)

    async def _close(self) -> None:
        connector, self.connector = self.connector, None
        if connector is not None:
            connector.cancel()
            await asyncio.gather(connector, return_exceptions=True)
        ws = self._client.ws
        if ws is not None and ws.open:
            with contextlib.suppress(Exception):  # gone already: closed is what we want
                await ws.close(code=1000)  # a clean close: Discord ends the session
        try:
            await self._on_close()
        except Exception:  # the next holder only reads a little more history
            log.warning("discord.gateway_on_close_failed", exc_info=True)

    async def _follow(self, lead: Lead) -> None:
        leading = self.connector is not None
        while True:
            await lead.wait_for(not leading)
            leading = not leading
            if leading:
                log.info("discord.gateway_taken: this replica now holds the gateway")
                self._open()
            else:
                log.warning("discord.gateway_lost: another replica may hold the gateway now; closing ours")
                await self._close()

    async def _stop_following(self) -> None:
        task, self._follower = self._follower, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def hand_over(self) -> None:
        """Close the session, then let the lead go: another replica connects within seconds."""
        if self._lead is None:
            return
        await self._stop_following()
        await self._close()
        await self.aclose()
        log.info("discord.gateway_handed_over")

    async def aclose(self) -> None:
        """After the client closed (its session with it): never two sessions for long."""
        await self._stop_following()
        if self.connector is not None:
            self.connector.cancel()
            await asyncio.gather(self.connector, return_exceptions=True)
            self.connector = None
        lead, self._lead = self._lead, None
        if lead is not None:
            await lead.aclose()


def _ended(task: asyncio.Task[None]) -> None:
    """discord.py gave the session up (a bad token, intents refused): said, loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.error("discord.gateway_ended: %r", task.exception())
