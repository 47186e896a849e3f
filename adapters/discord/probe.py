"""One-off checks against Discord for `roost doctor`: log in and read the application."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import discord

from adapters.discord.endpoints import point_at

FIX_INTENT = (
    "Discord Developer Portal → your application → Bot → Privileged Gateway Intents → "
    "enable MESSAGE CONTENT INTENT, then restart"
)


@dataclass(frozen=True, slots=True)
class Probe:
    bot_name: str
    message_content: bool
    """The application may receive message content (the privileged intent is enabled)."""


async def probe(token: str, api_base: str, timeout_s: float = 15.0) -> Probe:
    """Log in (REST only, no gateway) and read the application's intent flags; raises
    `discord.LoginFailure` for a rejected token, `discord.HTTPException` / OSError otherwise."""
    point_at(api_base, None)
    client = discord.Client(intents=discord.Intents.none())
    try:
        async with asyncio.timeout(timeout_s):  # doctor must answer, not hang on a dead host
            await client.login(token)
        flags = client.application_flags
        name = client.user.name if client.user else "?"
        return Probe(name, bool(flags.gateway_message_content or flags.gateway_message_content_limited))
    finally:
        await client.close()
