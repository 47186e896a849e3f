"""The Storage facade: one object with every repository method, and its lifecycle."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.storage.access import AccessRepository
from bot.storage.approvals import ApprovalRepository
from bot.storage.audit import AuditRepository
from bot.storage.base import Clock, utc_now
from bot.storage.compactions import CompactionRepository
from bot.storage.delivery import DeliveryRepository
from bot.storage.engine import create_engine
from bot.storage.group_context import GroupContextRepository
from bot.storage.inbox import InboxRepository
from bot.storage.jobs import JobRepository
from bot.storage.metrics import MetricsRepository
from bot.storage.migrate import upgrade
from bot.storage.plans import PlanRepository
from bot.storage.runs import RunRepository
from bot.storage.records import SessionRow, SessionScope
from bot.storage.sessions import SessionRepository
from bot.storage.usage import UsageRepository


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
):
    """Everything Roost persists; implements `agent_core.ports.AgentStore`.

    Lifecycle: `storage = await Storage.open(url)` (creates the engine and migrates to head),
    then `await storage.aclose()` — or `async with await Storage.open(url) as storage:`.
    Any method called after `aclose()` raises StorageClosed. The instance is safe to share
    between tasks: each method runs its own short transaction on a pooled connection.
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
        self, inbox_id: int, session_key: str, scope: SessionScope, platform: str, chat_id: str
    ) -> SessionRow:
        """`ensure_session` + `queue_inbound` in one transaction: the message waits for a run
        of a session that exists."""
        async with self._tx() as s:
            session = await self._ensure_session_in(s, session_key, scope, platform, chat_id)
            await self._set_state_in(s, [inbox_id], "queued", session_key=session_key)
            return session

    async def take_inbound_for_run(self, ids: Sequence[int], run_id: str, session_key: str) -> SessionRow | None:
        """`take_inbound` + `get_session` in one transaction: the run is about to answer these
        messages, with the session as it is now (a /model while they waited counts)."""
        async with self._tx() as s:
            await self._set_state_in(s, ids, "running", run_id=run_id)
            return await self._get_session_in(s, session_key)

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Release the connection pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
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
