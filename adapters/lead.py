"""One consumer per bot: what an adapter needs to know when several replicas serve one bot.

Some platforms let only one connection of a bot take in its traffic: Discord dispatches
every gateway event to each session of a bot (two sessions answer everything twice), and
Telegram refuses a second getUpdates consumer (409 Conflict). With replicas, the holder of
a `Lead` for that role opens the connection; the others send and edit through the REST API
only, and open it when the lead becomes theirs. Implemented by the composition root
(bot.leadership: a PostgreSQL advisory lock); without replicas there is none, and the one
process always connects.

A lead is a hint, not a fence: for the few seconds a lost lock goes unnoticed two replicas
may both hold the connection; what must happen once is kept so by the inbox (each message
stored once, by its platform id).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Lead(Protocol):
    held: bool
    """This replica leads now."""

    async def start(self) -> None:
        """Try once at once (a lone replica leads from the start), then keep trying."""
        ...

    async def wait_for(self, held: bool) -> None:
        """Return once `held` is what it is (at once if it already is)."""
        ...

    async def aclose(self) -> None:
        """Let go: another replica may lead within seconds."""
        ...


Leads = Callable[[str], Lead]
"""A lead for a role (e.g. "discord-gateway"), one per adapter that needs it."""
