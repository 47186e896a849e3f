"""Several `roost run` replicas on one PostgreSQL: each session answered by one replica at a
time, in order, each message once, whichever replica took it in.

The inbox is the shared queue. A replica that accepts a message for a session tries to take
the session's lane (bot.lane_claims); if another replica holds it, the row simply stays
`queued`, and the holder takes it in before each run (`refill`, merged by inbox id, which
is arrival order). A holder lets go only with its lane empty, and then looks once more: a
row queued while it held the lane, by a replica that could not take it, is either seen by
that last look or was queued after the release and taken by its own replica — never left
behind. A sweep every few seconds takes over sessions nobody holds (a replica that died:
its lock went with its connection) and settles their cut-off rows as a restart would.

Runs claim their rows conditionally (`Storage.claim_inbound_for_run`): a lane briefly held twice
still answers each message once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from bot.lane_claims import LaneClaims
from bot.pending import Pending
from bot.router import Accept
from bot.scheduling.refs import job_ref
from bot.session_keys import scope_of

if TYPE_CHECKING:
    from bot.lanes import Lanes
    from bot.router import Router
    from bot.storage import Storage


class Host(Protocol):
    """What replicas use of `bot.conversations.Conversations` (which imports this module)."""

    storage: Storage
    router: Router
    lanes: Lanes[Pending]

    async def recover_deliveries(self, run_ids: set[str] | None = None) -> int: ...

log = logging.getLogger(__name__)

SWEEP_S = 3.0
"""How often sessions nobody holds are looked for (a dead replica's are taken within it)."""
LAST = 1 << 62


class Replicas:
    def __init__(self, conversations: Host, claims: LaneClaims, *, sweep_s: float = SWEEP_S) -> None:
        self.c = conversations
        self.claims = claims
        self.sweep_s = sweep_s
        self._in_lane: set[int] = set()
        """Inbox rows handed to this replica's lanes and not finished yet."""
        self._sweeper: asyncio.Task[None] | None = None
        self._stopped = False
        lanes = conversations.lanes
        lanes.refill = self._refill
        lanes.order = lambda p: p.inbox_id if p.inbox_id is not None else LAST
        lanes.on_idle = self._idle

    def known(self, inbox_id: int | None) -> bool:
        return inbox_id is not None and inbox_id in self._in_lane

    async def take(self, key: str, inbox_id: int | None) -> bool:
        """Whether this replica runs the item now: it holds (or just took) the session's
        lane and the item is not in its lanes already."""
        if self.known(inbox_id) or self._stopped:
            return False
        if not await self.claims.claim(key):
            return False
        if inbox_id is not None:
            self._in_lane.add(inbox_id)
        return True

    async def claim(self, items: list[Pending], run_id: str, key: str) -> tuple[list[Pending], str | None]:
        """The items the run `run_id` may answer — those whose rows no other run took, now
        taken — and the session's model, in one transaction."""
        ids = [p.inbox_id for p in items if p.inbox_id is not None]
        found, model = await self.c.storage.claim_inbound_for_run(ids, run_id, key)
        taken = set(found)
        kept = [p for p in items if p.inbox_id is None or p.inbox_id in taken]
        self.done([p for p in items if p not in kept])
        if len(kept) < len(items):
            log.info("inbox.answered_elsewhere", extra={"messages": len(items) - len(kept)})
        return kept, model

    def done(self, items: Iterable[Pending]) -> None:
        for p in items:
            if p.inbox_id is not None:
                self._in_lane.discard(p.inbox_id)

    async def _refill(self, key: str) -> list[Pending]:
        """What other replicas queued for this session, not yet in this replica's lane."""
        rows = [r for r in await self.c.storage.queued_inbound(key) if r.id not in self._in_lane]

        items = []
        for row in rows:
            inbound = row.message.inbound()
            route = Accept(key, scope_of(key), self.c.router.is_owner(inbound))
            items.append(Pending(inbound, route, row.id, job_ref(row.message.update_id)))
            self._in_lane.add(row.id)
        return items

    async def _idle(self, key: str) -> None:
        if self.c.lanes.active(key):  # new work arrived meanwhile: still ours
            return
        await self.claims.release(key)
        if not self._stopped and await self.c.storage.queued_inbound(key):
            await self.take_over(key)  # queued while we held it, after our last look

    async def take_over(self, key: str) -> bool:
        """Take a session nobody holds: settle what a dead holder left, then run its queue."""
        if self._stopped or self.c.lanes.active(key) or not await self.claims.claim(key):
            return False
        if not self.c.lanes.active(key):
            # What the dead holder was running: cut off in place and offered once, then its
            # messages settled as a restart settles them.
            cut = await self.c.storage.mark_interrupted_runs(session_key=key)
            if cut:
                await self.c.recover_deliveries({r.id for r in cut})
            settled = await self.c.storage.recover_session_inbox(key)
            if settled or cut:
                log.info("lane.taken_over", extra={"session": key, "settled": settled, "runs": len(cut)})
        items = await self._refill(key)
        if items:
            self.c.lanes.requeue(key, items)
        elif not self.c.lanes.active(key):
            await self.claims.release(key)
        return True

    def start(self) -> None:
        if self._sweeper is None and not self._stopped:
            self._sweeper = asyncio.create_task(self._sweep(), name="replicas:sweep")

    async def _sweep(self) -> None:
        while True:
            try:
                for key in await self.c.storage.waiting_sessions():
                    if not self.c.lanes.active(key) and not self.claims.holds(key):
                        await self.take_over(key)
            except Exception:  # the database is away: the next sweep tries again
                log.warning("replicas.sweep_failed", exc_info=True)
            await asyncio.sleep(self.sweep_s)  # timing-ok: the sweep period itself

    async def stop(self) -> None:
        """Shutting down: no session is taken any more (held ones stay until `aclose`)."""
        self._stopped = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    async def aclose(self) -> None:
        await self.stop()
        await self.claims.aclose()
