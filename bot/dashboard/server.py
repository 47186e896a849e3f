"""Where the dashboard listens, and uvicorn's server run as a task of Roost's own loop.

Loopback only unless ROOST_DASHBOARD__ALLOW_REMOTE=true: the pages show every chat's
messages and can approve commands. A port already taken does not stop `roost run` (the chats
matter more than the page): it is logged and the dashboard stays off."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


class RemoteRefused(Exception):
    """A non-loopback address without the opt-in; the message is the one line to print."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_address(host: str, port: int, allow_remote: bool) -> None:
    if not allow_remote and not is_loopback(host):
        raise RemoteRefused(
            f"the dashboard would listen on {host}:{port}, which other machines can reach; "
            "set ROOST_DASHBOARD__ALLOW_REMOTE=true to allow that, or ROOST_DASHBOARD__LISTEN=127.0.0.1:8765"
        )


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections (Linux): uvicorn writes a response's head and body
    # separately, and Nagle + delayed ACK held every kept-alive response back ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


@dataclass
class Served:
    server: Any
    sock: socket.socket
    hub: Any = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def aclose(self) -> None:
        if self.hub is not None:
            self.hub.closed.set()  # open event streams end; their pages reconnect to nothing
            self.hub.publish("closing")
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.shutdown(sockets=[self.sock]), timeout=5)


async def serve(app: Any, sock: socket.socket) -> Served:
    """Start serving `app` on the bound `sock` in this loop; no signal handlers, no logging
    set-up and no 0.1 s tick of uvicorn's own main loop (Roost owns all three)."""
    import uvicorn

    config = uvicorn.Config(
        app, loop="none", http="h11", ws="none", lifespan="off", log_config=None, access_log=False,
        server_header=False, date_header=False, timeout_graceful_shutdown=2, proxy_headers=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    config.load()
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[sock])
    return Served(server, sock)


def dashboard_for(roost: Any, adapters: Any) -> Any:
    """The dashboard of a built application (`bot.app.Roost`), acting as the owner."""
    from adapters.console import IDENTITY as CONSOLE_IDENTITY
    from bot.dashboard.web import Dashboard
    from bot.logs import RedactSecrets
    from bot.operations import Actor, Live, Operations
    from bot.operations.cli import config_groups
    from bot.roles import Role
    from bot.storage.audit import redact_known_shapes

    settings = roost.settings
    live = Live(
        gate=roost.gate, scheduler=roost.scheduler, breakers=roost.breakers, lanes=roost.conversations.lanes,
        live_config=roost.live, platforms=lambda: [a.platform for a in adapters],
        services=roost.conversations.operations.live.services,  # MCP servers, speech engines
    )  # fmt: skip
    ops = Operations(
        roost.storage, owners=settings.owners, approvers=settings.approvers, config_groups=config_groups(settings),
        workspace=settings.workspace_dir, settings_view=lambda: settings_view(settings), live=live,
    )  # fmt: skip
    # Decisions are the owner's: the gate knows them by their chat identity (the card then
    # names them), else as the terminal's owner.
    identity = settings.owners[0] if settings.owners else CONSOLE_IDENTITY
    redactor = RedactSecrets(settings.secrets)
    return Dashboard(
        ops, home=settings.home_dir, actor=Actor(identity, Role.OWNER, "dashboard"),
        redact=lambda text: redact_known_shapes(redactor.redact(text)), timezone=settings.tz_name,
        allowed_hosts=None if settings.dashboard.allow_remote else ["127.0.0.1", "localhost", "[::1]", "::1"],
    )  # fmt: skip


def settings_view(settings: Any) -> dict[str, Any]:
    """The settings in effect, secrets left out (their presence only)."""
    data = settings.model_dump(mode="json", exclude={"policy", "limits"})
    for key in ("telegram_bot_token", "discord_bot_token", "anthropic_api_key"):
        data[key] = "set" if data.get(key) else "not set"
    if isinstance(data.get("telegram"), dict) and data["telegram"].get("webhook_secret"):
        data["telegram"]["webhook_secret"] = "set"
    if data.get("database_url"):
        data["database_url"] = "set"
    return data


async def start(roost: Any, adapters: Any) -> tuple[Served, str] | None:
    """Serve the dashboard (ROOST_DASHBOARD__LISTEN; checked by `check_address` before);
    (served, login link), or None when it is off or its port is taken."""
    from bot.dashboard import login

    address = roost.settings.dashboard.address
    if address is None:
        return None
    host, port = address
    try:
        sock = bind(host, port)
    except OSError as exc:
        log.warning("dashboard.not_started", extra={"listen": f"{host}:{port}", "reason": str(exc)})
        return None
    dashboard = dashboard_for(roost, adapters)
    served = await serve(dashboard.app(), sock)
    served.hub = dashboard.hub  # type: ignore[attr-defined]
    token = login.current(roost.settings.home_dir)
    return served, login.login_url(host, served.port, token)
