"""Long polling with replicas: Telegram serves getUpdates to one consumer of a bot at a time
(a second gets 409 Conflict, and each preempts the other), so only the replica holding the
"telegram-polling" lead (adapters.lead) polls. The others send through the Bot API only and
start polling when the lead becomes theirs; one that loses it stops. Updates are confirmed
only once stored (intake.py), so whatever the last poller fetched but did not store comes
back to the next one, and the inbox keeps each update once. Webhook mode needs no lead:
every replica accepts what the load balancer gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from telegram.ext import Updater

from adapters.lead import Lead, Leads

log = logging.getLogger(__name__)

POLLING_ROLE = "telegram-polling"
RETRY_S = 5.0
"""A poller that could not start (Telegram unreachable) tries again this much later."""


class Polling:
    def __init__(self, updater: Updater, leads: Leads | None, poll: Callable[[], Awaitable[object]]) -> None:
        self._updater, self._poll = updater, poll
        self._lead: Lead | None = leads(POLLING_ROLE) if leads is not None else None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Poll now if this replica leads (or is the only one); else follow the lead."""
        if self._lead is None:
            await self._poll()
            return
        await self._lead.start()  # one attempt at once: a lone replica polls from the start
        if self._lead.held:
            await self._poll()
        else:
            log.info("telegram.polling_follower: another replica polls; sending only")
        self._task = asyncio.get_running_loop().create_task(self._follow(self._lead), name="telegram-polling-lead")

    async def _follow(self, lead: Lead) -> None:
        polling = self._updater.running
        while True:
            await lead.wait_for(not polling)
            if not polling:
                log.info("telegram.polling_taken: this replica polls now")
                try:
                    await self._poll()
                except Exception:  # Telegram away: the lead stays ours, polling is tried again
                    log.warning("telegram.polling_start_failed", exc_info=True)
                    await asyncio.sleep(RETRY_S)  # timing-ok: the retry period itself
                    continue
                polling = True
            else:
                log.warning("telegram.polling_lost: another replica may poll now; stopping")
                await self._stop()
                polling = False

    async def _stop(self) -> None:
        if self._updater.running:
            await self._updater.stop()

    async def hand_over(self) -> None:
        """Stop polling, then let the lead go: another replica polls within seconds."""
        if self._lead is None:
            return
        await self._cancel()
        await self._stop()
        await self.aclose()

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def aclose(self) -> None:
        """After the updater stopped: never two pollers for long."""
        await self._cancel()
        lead, self._lead = self._lead, None
        if lead is not None:
            await lead.aclose()
