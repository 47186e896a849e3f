"""Discord, via discord.py 2: see `adapters.discord.adapter`.

Modules: `adapter` (lifecycle, inbound, notices), `endpoints` (REST base and gateway URL),
`updates` (Message → Inbound), `transport` (ChatTransport over discord.py, error
translation), `reply` (a run's ReplySink over `adapters.run_reply`), `approval_views`
(Discord's `adapters.cards.CardSender` and restart-proof buttons), `commands` (slash
commands), `gateway` (the gateway session, held by one replica at a time), `probe` (login and application flags for `roost doctor`). Nothing here imports
`adapters.telegram`: what the platforms share lives in `adapters/` (`run_reply`, `cards`,
`pacing`, `button_actions`).
"""

from __future__ import annotations

from adapters.discord.adapter import DiscordAdapter, DiscordStartError

__all__ = ["DiscordAdapter", "DiscordStartError"]
