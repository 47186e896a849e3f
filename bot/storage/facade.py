"""The Storage facade: one object with every repository method, and its lifecycle."""

from __future__ import annotations

import contextlib

from collections.abc import Sequence
from types import TracebackType

from sqlalchemy.engine import URL, Connection
from sqlalchemy.engine import Engine as SyncEngine
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.storage.access import AccessRepository
from bot.storage.approvals import ApprovalRepository
from bot.storage.audit import AuditRepository
from bot.storage.browse import BrowseRepository
from bot.storage.base import Clock, rowcount, utc_now
from bot.storage.compactions import CompactionRepository
from bot.storage.cursors import CursorRepository
from bot.storage.delivery import DeliveryRepository
from bot.storage.engine import create_engine
from bot.storage.group_context import GroupContextRepository
from bot.storage.inbox import InboxRepository, accept_statement, claim_statement, set_inbox_state
from bot.storage.jobs import JobRepository
from bot.storage.limits import LimitRepository
from bot.storage.metrics import MetricsRepository
from bot.storage.migrate import upgrade
from bot.storage.plans import PlanRepository
from bot.storage.runs import RunRepository
from bot.storage.sends import SendRepository
from bot.storage.records import SessionScope
from bot.storage.sessions import SessionRepository, insert_session_if_absent, select_model_override
from bot.storage.usage import UsageRepository


KNOWN_SESSIONS_KEPT = 10_000


class Storage(
    SessionRepository,
    RunRepository,
    ApprovalRepository,
    DeliveryRepository,
    AccessRepository,
    GroupContextRepository,
    AuditRepository,
    UsageRepository,
    InboxRepository,
    JobRepository,
    PlanRepository,
    MetricsRepository,
    CompactionRepository,
    SendRepository,
    CursorRepository,
    BrowseRepository,
    LimitRepository,
):
    """Everything Roost persists; implements `agent_core.ports.AgentStore`.

    Lifecycle: `storage = await Storage.open(url)` (creates the engine and migrates to head),
    then `await storage.aclose()` — or `async with await Storage.open(url) as storage:`.
    Any method called after `aclose()` raises StorageClosed. The instance is safe to share
    between tasks: each method runs its own short transaction (the hot path's on the writer
    of bot.storage.writer, the rest on a pooled connection).
    """

    @classmethod
    async def open(
        cls,
        url: str | URL,
        *,
        clock: Clock = utc_now,
        migrate: bool = True,
        echo: bool = False,
    ) -> Storage:
        """Connect to `url` and (unless migrate=False) upgrade the schema to head.
        On failure the engine is disposed before the error propagates."""
        engine = create_engine(url, echo=echo)
        try:
            if migrate:
                await upgrade(engine)
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine, clock=clock)

    @classmethod
    def from_engine(cls, engine: AsyncEngine, *, clock: Clock = utc_now) -> Storage:
        """Wrap an existing engine (already migrated); aclose() disposes it."""
        return cls(engine, clock=clock)

    # -- the first-reply path: one transaction where two used to be --------------------

    async def accept_inbound(
        self, inbox_id: int, session_key: str, scope: SessionScope, platform: str, chat_id: str, *, routed: bool = False
    ) -> bool:
        """`ensure_session` + `queue_inbound` in one transaction: the message waits for a run
        of a session that exists. Sessions are never deleted, so one seen to exist is not
        looked up again. `routed` (replicas): only a row still this replica's to route
        (`route_received`) is queued; False when another replica adopted it meanwhile."""
        now = self._now()
        known = session_key in self._existing_sessions

        def body(conn: Connection) -> bool:
            if not known:
                insert_session_if_absent(conn, self._dialect, session_key, scope, platform, chat_id, now)
            if routed:
                return rowcount(conn.execute(accept_statement(inbox_id, self.received_by, session_key, now))) == 1
            set_inbox_state(conn, [inbox_id], "queued", now, session_key=session_key)
            return True

        accepted = await self._transact(body)
        if len(self._existing_sessions) >= KNOWN_SESSIONS_KEPT:
            self._existing_sessions.clear()  # bounded: a forgotten key costs one SELECT
        self._existing_sessions.add(session_key)
        return accepted

    async def take_inbound_for_run(self, ids: Sequence[int], run_id: str, session_key: str) -> str | None:
        """`take_inbound` + the session's model override (None: the configured model) in one
        transaction: the run is about to answer these messages, with the session as it is
        now (a /model while they waited counts)."""
        now = self._now()

        def body(conn: Connection) -> str | None:
            set_inbox_state(conn, ids, "running", now, run_id=run_id)
            return select_model_override(conn, session_key)

        return await self._transact(body)

    async def claim_inbound_for_run(
        self, ids: Sequence[int], run_id: str, session_key: str
    ) -> tuple[list[int], str | None]:
        """`take_inbound_for_run` for replicas: only the rows no run took yet are taken
        (returned with the session's model override), so two replicas that both believe they
        hold a lane answer each message once."""
        now = self._now()

        def body(conn: Connection) -> tuple[list[int], str | None]:
            taken = [int(i) for i in conn.execute(claim_statement(ids, run_id, now)).scalars()]
            return taken, select_model_override(conn, session_key)

        return await self._transact(body)

    @property
    def sync_engines(self) -> list[SyncEngine]:
        """The engines transactions begin on (for SQLAlchemy event listeners: counting,
        tracing): the pool's, and the hot path's when it has its own connection."""
        engines = [self._engine.sync_engine, self._runner.sync_engine]
        return list(dict.fromkeys(engines))

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Release the connection pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._runner.aclose()
        # A transaction on the pool still in flight ends first: disposing does not close a
        # checked-out connection, which would hold SQLite's write lock past our return.
        async with self._serial or contextlib.nullcontext():
            await self._engine.dispose()

    async def __aenter__(self) -> Storage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
