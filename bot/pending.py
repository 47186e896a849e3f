"""A message waiting in a session's lane for its run (the lanes' item type), below
`bot.conversations` so the features that build one need not import it."""

from __future__ import annotations

from dataclasses import dataclass

from agent_core.inbound import Inbound
from bot.router import Accept
from bot.scheduling.refs import JobRef


@dataclass(frozen=True, slots=True)
class Pending:
    inbound: Inbound
    route: Accept
    inbox_id: int | None = None
    """Its row in the inbox (None only for items built outside `receive`)."""
    job: JobRef | None = None
    """Set when this is a scheduled job's due run (bot.scheduling)."""
