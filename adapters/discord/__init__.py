"""Discord, via discord.py 2: see `adapters.discord.adapter`.

Modules: `adapter` (lifecycle, inbound, notices), `endpoints` (REST base and gateway URL),
`updates` (Message → Inbound), `transport` (ChatTransport over discord.py, error
translation), `reply` (a run's ReplySink), `approval_views` (cards and restart-proof
buttons), `commands` (slash commands).
"""

from __future__ import annotations

from adapters.discord.adapter import DiscordAdapter, DiscordStartError

__all__ = ["DiscordAdapter", "DiscordStartError"]
