"""The Storage facade: one object with every repository method, and its lifecycle."""

from __future__ import annotations

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
