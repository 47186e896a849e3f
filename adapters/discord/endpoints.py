"""Where discord.py connects: the REST base and the gateway URL (the ONE place they are set).

discord.py has no per-client setting for either: every REST route is built from the class
attribute `discord.http.Route.BASE` (interaction callbacks and webhooks included), and a
non-sharded client opens the gateway at `DiscordWebSocket.DEFAULT_GATEWAY` (after READY it
resumes at the `resume_gateway_url` the server gave). So `point_at` sets both class
attributes, process-wide: one process talks to one Discord. With `gateway_url` None, the
default API keeps Discord's gateway, and any other API base is asked (GET /gateway/bot) for
its gateway once logged in (`adopt_gateway`).
"""

from __future__ import annotations

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import HTTPClient, Route

DEFAULT_API_BASE = "https://discord.com/api/v10"
DEFAULT_GATEWAY = "wss://gateway.discord.gg/"


def point_at(api_base: str, gateway_url: str | None) -> None:
    """Send every discord.py request of this process to `api_base` and open the gateway
    at `gateway_url` (None: Discord's, or the one `adopt_gateway` finds)."""
    Route.BASE = api_base.rstrip("/")
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url or DEFAULT_GATEWAY)


def needs_gateway_lookup(api_base: str, gateway_url: str | None) -> bool:
    return gateway_url is None and api_base.rstrip("/") != DEFAULT_API_BASE


async def adopt_gateway(http: HTTPClient) -> str:
    """Ask the REST server which gateway to use (logged-in `http`) and use it."""
    _, url, _ = await http.get_bot_gateway()
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
    return url
