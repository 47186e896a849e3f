"""Signals between the `roost run` replicas of one PostgreSQL: a press or an answer that lands
on one replica reaches the run waiting on another.

    replica B ──NOTIFY roost_signals {topic, request}──▶ every replica (LISTEN)
    replica A (serves the topic, e.g. the approval waits here) ──NOTIFY {reply}──▶ B

`publish` tells every other replica; `call` asks them and takes the first reply, or None
when none comes within the timeout (no replica claims it: e.g. the run's replica died, and
the caller falls back to what one process does). Handlers answer None for "not mine".

Notifications are lost while a listening connection is down, so they are only a fast path:
what they carry is in the database first (the approval's or question's row), and the
waiters re-read their rows after every reconnect and every `recheck_s` (`on_recheck`).
The connection is checked every `check_s` and re-made with backoff when it fails.

On SQLite (one process, bot.instance_lock) there is nobody to tell: `publish` does nothing
and `call` answers None at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.engine import URL

log = logging.getLogger(__name__)

CHANNEL = "roost_signals"
CHECK_S = 2.0
"""How often the listening connection is checked (a dead one is re-made within about this)."""
RECHECK_S = 10.0
"""The safety net: how often waiters re-read their rows even when nothing was heard."""
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
CALL_TIMEOUT_S = 2.0
MAX_PAYLOAD = 7000
"""NOTIFY payloads end at 8000 bytes: signals carry ids, never texts."""

Payload = dict[str, Any]
Handler = Callable[[Payload], Awaitable[Payload | None]]


class Signals:
    """One per process; `start` before use, `aclose` at the end (see the module docstring)."""

    def __init__(
        self, url: URL | None, *, check_s: float = CHECK_S, recheck_s: float = RECHECK_S,
        backoff_s: tuple[float, ...] = BACKOFF_S,
    ) -> None:  # fmt: skip
        self.shared = url is not None
        """Other replicas may serve the database (PostgreSQL)."""
        self._dsn = None if url is None else url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.id = uuid.uuid4().hex[:12]
        self.check_s = check_s
        self.recheck_s = recheck_s
        self._backoff = backoff_s
        self._handlers: dict[str, Handler] = {}
        self.on_recheck: list[Callable[[], Awaitable[None]]] = []
        """Re-read what waits (after a reconnect, and every `recheck_s`): a signal may be lost."""
        self._conn: Any = None  # asyncpg.Connection
        self._send = asyncio.Lock()  # one statement at a time on the connection
        self._calls: dict[str, asyncio.Future[Payload]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._monitor: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._closed = False

    def serve(self, topic: str, handler: Handler) -> None:
        """Answer `topic` from other replicas: the handler's reply, or None (not mine)."""
        self._handlers[topic] = handler

    async def start(self) -> None:
        if not self.shared or self._monitor is not None:
            return
        with contextlib.suppress(Exception):  # the monitor retries
            await self._connect()
        self._monitor = asyncio.create_task(self._watch(), name="signals:watch")

    async def publish(self, topic: str, payload: Payload) -> None:
        """Tell every other replica; lost if the connection is down (the rows are the truth)."""
        await self._notify({"t": topic, "f": self.id, "p": payload})

    async def call(self, topic: str, payload: Payload, timeout: float = CALL_TIMEOUT_S) -> Payload | None:
        """Ask the other replicas; the first reply, or None when none answers in `timeout`."""
        if not self.shared or self._closed:
            return None
        rid = uuid.uuid4().hex[:12]
        reply: asyncio.Future[Payload] = asyncio.get_running_loop().create_future()
        self._calls[rid] = reply
        try:
            if not await self._notify({"t": topic, "f": self.id, "r": rid, "p": payload}):
                return None
            async with asyncio.timeout(timeout):
                return await reply
        except TimeoutError:
            return None
        finally:
            self._calls.pop(rid, None)

    # --- the connection ------------------------------------------------------------
    async def _notify(self, message: Payload) -> bool:
        if not self.shared or self._closed:
            return False
        data = json.dumps(message, separators=(",", ":"))
        if len(data.encode()) > MAX_PAYLOAD:
            raise ValueError(f"signal too large ({len(data)} bytes): send an id, not a text")
        async with self._send:
            conn = self._conn
            if conn is None:
                return False
            try:
                async with asyncio.timeout(self.check_s * 2):
                    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, data)
            except Exception as exc:  # the monitor re-makes the connection
                log.warning("signals.send_failed", extra={"error": type(exc).__name__})
                self._lost(conn)
                return False
        return True

    async def _connect(self) -> None:
        import asyncpg  # PostgreSQL only: never loaded for SQLite

        async with asyncio.timeout(self.check_s * 2):
            conn = await asyncpg.connect(self._dsn)
        try:
            await conn.add_listener(CHANNEL, self._heard)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(lambda c: self._lost(c))
        self._conn = conn
        self._connected.set()
        log.info("signals.listening", extra={"replica": self.id})

    def _lost(self, conn: Any) -> None:
        if self._conn is conn and conn is not None:
            self._conn = None
            self._connected.clear()
            conn.terminate()

    async def _watch(self) -> None:
        """Keep the connection (backoff between attempts); re-read waiters after a reconnect
        and every `recheck_s`."""
        failures = 0
        since_recheck = 0.0
        while True:
            reconnected = False
            if self._conn is None:
                try:
                    await self._connect()
                    failures, reconnected = 0, True
                except Exception as exc:
                    delay = self._backoff[min(failures, len(self._backoff) - 1)]
                    failures += 1
                    log.warning("signals.reconnect_failed", extra={"error": type(exc).__name__, "retry_s": delay})
                    await asyncio.sleep(delay)  # timing-ok: reconnect backoff
                    continue
            if reconnected or since_recheck >= self.recheck_s:
                since_recheck = 0.0
                await self._recheck()
            await asyncio.sleep(self.check_s)  # timing-ok: the check period itself
            since_recheck += self.check_s
            conn = self._conn
            if conn is not None:
                try:
                    async with self._send, asyncio.timeout(self.check_s * 2):
                        await conn.execute("SELECT 1")
                except Exception as exc:
                    log.warning("signals.lost", extra={"error": type(exc).__name__})
                    self._lost(conn)

    async def _recheck(self) -> None:
        for recheck in list(self.on_recheck):
            try:
                await recheck()
            except Exception:  # the database is away: the next round tries again
                log.warning("signals.recheck_failed", exc_info=True)

    # --- what arrives --------------------------------------------------------------
    def _heard(self, conn: Any, pid: int, channel: str, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if message.get("f") == self.id:
            return  # our own
        if message.get("t") == "_reply":
            reply = self._calls.get(message.get("r", ""))
            if message.get("to") == self.id and reply is not None and not reply.done():
                reply.set_result(message.get("p") or {})
            return
        handler = self._handlers.get(message.get("t", ""))
        if handler is not None:
            task = asyncio.get_running_loop().create_task(self._handle(handler, message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, handler: Handler, message: Payload) -> None:
        try:
            reply = await handler(message.get("p") or {})
            if reply is not None and message.get("r"):
                await self._notify({"t": "_reply", "f": self.id, "to": message["f"], "r": message["r"], "p": reply})
        except Exception:  # one bad signal must not stop the others
            log.exception("signals.handler_failed", extra={"topic": message.get("t")})

    async def aclose(self) -> None:
        self._closed = True
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
