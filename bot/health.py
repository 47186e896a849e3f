"""`GET /healthz` for a load balancer or orchestrator in front of `roost run` replicas.

200 "ok" while the process serves and its database answers; 503 once it is stopping (SIGTERM:
the proxy stops sending it webhooks while it finishes) or when the database does not answer
within `DB_TIMEOUT_S`. A few lines of HTTP/1.0 on asyncio's own server: nothing else is
served here, and nothing about the process (no version, no error text) is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

DB_TIMEOUT_S = 2.0


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ROOST_HEALTH_LISTEN {listen!r} is not host:port")
    return host or "0.0.0.0", int(port)


class Health:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.stopping = False
        self._server: asyncio.Server | None = None

    async def start(self, listen: str) -> None:
        host, port = parse_listen(listen)
        self._server = await asyncio.start_server(self._serve, host, port)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def status(self) -> tuple[int, str]:
        if self.stopping:
            return 503, "stopping"
        try:
            async with asyncio.timeout(DB_TIMEOUT_S), self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            log.warning("health.database_unreachable", extra={"error": type(exc).__name__})
            return 503, "database unreachable"
        return 200, "ok"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                request = await reader.readline()
                while (await reader.readline()).strip():  # headers: read and ignored
                    pass
            method, _, rest = request.decode("latin-1").partition(" ")
            path = rest.split(" ", 1)[0]
            if method not in ("GET", "HEAD") or path.split("?", 1)[0] != "/healthz":
                code, body = 404, "not found"
            else:
                code, body = await self.status()
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[code]
            payload = (body + "\n").encode()
            head = (f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
            writer.write(head + (b"" if method == "HEAD" else payload))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
