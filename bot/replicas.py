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

Per-chat order. A message is stored `received` (and confirmed to the platform) by whichever
replica the load balancer chose, and routed — given its session, `queued` — a moment later by
that replica. The platform sends a chat's next message only once the previous one is stored,
so within a chat the inbox id is the order it was written in. The invariant held here:

    A lane holder runs a batch only after one statement (`Storage.session_queue`) saw every
    row of the batch `queued` and no `received` row of the same chat older than any of them.

So a message routed quickly on replica B never overtakes an older one replica A stored but has
not routed yet: the holder waits (polling the inbox, backing off to `POLL_MAX_S`) until A
routed it — it then joins the lane by id, in front — and rows are taken in id order. A row
queued while that statement ran (`take` meanwhile) means one more look. The wait is bounded:
a replica names itself (`LaneClaims.identity`, a lock that dies with it) on the rows it
stores, and the sweep adopts the `received` rows older than `orphan_after_s` of a replica that
is gone (or of no known replica) and routes them through the usual path (`adopt_unrouted`:
conditional, so a row is routed by one replica; a live replica's rows are never taken from
it). A live replica that never routes its row holds the chat back at most `order_wait_s`.
Single-process SQLite has no `Replicas` and waits for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from adapters.base import Taken
from bot.lane_claims import LaneClaims
from bot.pending import Pending
from bot.router import Accept
from bot.scheduling.refs import job_ref
from bot.session_keys import scope_of

if TYPE_CHECKING:
    from agent_core.approvals import ApprovalGate
    from agent_core.ports import ApprovalRecord
    from bot.lanes import Lanes
    from bot.router import Router
    from bot.storage import Storage
    from bot.storage.inbox import InboxRow


class Host(Protocol):
    """What replicas use of `bot.conversations.Conversations` (which imports this module)."""

    storage: Storage
    router: Router
    lanes: Lanes[Pending]
    gate: ApprovalGate

    async def recover_deliveries(self, run_ids: set[str] | None = None) -> int: ...

    async def close_expired_cards(self, records: list[ApprovalRecord]) -> None: ...

    async def handle(self, taken: Taken) -> bool: ...

log = logging.getLogger(__name__)

SWEEP_S = 3.0
"""How often sessions nobody holds are looked for (a dead replica's are taken within it)."""
ORPHAN_AFTER_S = 2.0
"""A `received` row this old whose replica is gone is adopted by the sweep (routing takes ms)."""
ORDER_WAIT_S = 30.0
"""The longest a lane waits for an older message of its chat that a live replica stored but
does not route (a wedged replica): then it runs what it has, out of order, and says so."""
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.1
LAST = 1 << 62


class Replicas:
    def __init__(
        self,
        conversations: Host,
        claims: LaneClaims,
        *,
        sweep_s: float = SWEEP_S,
        orphan_after_s: float = ORPHAN_AFTER_S,
        order_wait_s: float = ORDER_WAIT_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.c = conversations
        self.claims = claims
        self.sweep_s = sweep_s
        self.orphan_after_s = orphan_after_s
        self.order_wait_s = order_wait_s
        self._now = now
        self._in_lane: set[int] = set()
        """Inbox rows handed to this replica's lanes and not finished yet."""
        self._takes: dict[str, int] = {}
        """Per session, how many items `take` let into this replica's lane (see `_settled`)."""
        self.sweeps = 0
        """Sweeps completed (for views and tests)."""
        self._sweeper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.released: Callable[[], Awaitable[None]] | None = None
        """Tells the other replicas this one let its sessions go (`wake` there)."""
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
        self._takes[key] = self._takes.get(key, 0) + 1  # its row may be newer than a look under way
        return True

    async def identify(self) -> str | None:
        """Name the rows this replica stores as its own (while it lives, nobody adopts them)."""
        name = await self.claims.identity()
        self.c.storage.received_by = name
        return name

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
        """What other replicas queued for this session, not yet in this replica's lane — once
        no older message of its chat waits to be routed (the module's invariant)."""
        return self._pending(key, await self._settled(key))

    async def _settled(self, key: str) -> list[InboxRow]:
        """The session's queued rows, as seen by a look that saw every item of the lane and
        no unrouted row of its chats older than them; after `order_wait_s`, what there is."""
        delay, deadline = POLL_FIRST_S, time.monotonic() + self.order_wait_s
        while True:
            takes = self._takes.get(key, 0)
            view = await self.c.storage.session_queue(key)
            # An item that joined the lane during the look may be newer than what it saw.
            seen_all = self._takes.get(key, 0) == takes
            if seen_all and not view.unrouted:
                return view.queued
            if time.monotonic() >= deadline:
                log.warning("lane.order_wait_expired", extra={"session": key, "unrouted": [r.id for r in view.unrouted]})
                return view.queued
            if seen_all:  # another replica's row: polled (one that died is adopted by the sweep)
                await asyncio.sleep(delay)  # timing-ok: re-check another process's rows
                delay = min(delay * 2, POLL_MAX_S)

    def _pending(self, key: str, rows: list[InboxRow]) -> list[Pending]:
        items = []
        for row in rows:
            if row.id in self._in_lane:
                continue
            inbound = row.message.inbound()
            route = Accept(key, scope_of(key), self.c.router.is_owner(inbound))
            items.append(Pending(inbound, route, row.id, job_ref(row.message.update_id)))
            self._in_lane.add(row.id)
        return items

    async def _idle(self, key: str) -> None:
        if self.c.lanes.active(key):  # new work arrived meanwhile: still ours
            return
        self._takes.pop(key, None)
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
                # Its runs' approvals can never be answered now: expired, cards closed.
                await self.c.close_expired_cards(await self.c.gate.expire_orphans({r.id for r in cut}))
                await self.c.recover_deliveries({r.id for r in cut})
            settled = await self.c.storage.recover_session_inbox(key)
            if settled or cut:
                log.info("lane.taken_over", extra={"session": key, "settled": settled, "runs": len(cut)})
        # Not `_refill`: the sweep never waits on a chat; the lane's worker does, before running.
        items = self._pending(key, await self.c.storage.queued_inbound(key))
        if items:
            self.c.lanes.requeue(key, items)
        elif not self.c.lanes.active(key):
            await self.claims.release(key)
        return True

    def start(self) -> None:
        if self._sweeper is None and not self._stopped:
            self._sweeper = asyncio.create_task(self._sweep(), name="replicas:sweep")

    async def adopt_unrouted(self) -> int:
        """Route the `received` rows older than `orphan_after_s` whose replica is gone (or
        unknown), as their replica would have. Returns how many were adopted."""
        me = await self.identify()
        if me is None:
            return 0
        before = self._now() - timedelta(seconds=self.orphan_after_s)
        adopted = 0
        for owner in await self.c.storage.unrouted_owners(before):
            if owner == me or (owner is not None and await self.claims.alive(owner)):
                continue
            for row in await self.c.storage.adopt_inbound(owner, me, before):
                adopted += 1
                log.info("inbox.adopted", extra={"inbox": row.id, "replica": owner})
                try:
                    await self.c.handle(Taken(row.message.inbound(), row.id))
                except Exception:  # that message is dropped (as its own replica would); the rest go on
                    log.exception("inbox.adopted_route_failed", extra={"inbox": row.id})
        return adopted

    def wake(self) -> None:
        """Sweep now: another replica let its sessions go (a graceful stop said so)."""
        self._wake.set()

    async def _sweep(self) -> None:
        while not self._stopped:
            self._wake.clear()  # a wake from here on means one more sweep
            try:
                await self.adopt_unrouted()
                for key in await self.c.storage.waiting_sessions():
                    if not self.c.lanes.active(key) and not self.claims.holds(key):
                        await self.take_over(key)
            except Exception:  # the database is away: the next sweep tries again
                log.warning("replicas.sweep_failed", exc_info=True)
            self.sweeps += 1
            # The period, or a wake. Not `asyncio.wait_for`: on Python 3.11 a cancel that
            # meets a wake is swallowed, and `stop` then waited for this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.sweep_s):
                    await self._wake.wait()

    async def stop(self) -> None:
        """Shutting down: no session is taken any more (held ones stay until `aclose`)."""
        self._stopped = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            # Its cancellation comes back as a result; a cancel of ours still propagates.
            await asyncio.gather(sweeper, return_exceptions=True)

    async def aclose(self) -> None:
        await self.stop()
        await self.claims.release_lanes()  # the identity goes when the app closes (bot.app)
        if self.released is not None:
            # The others sweep now rather than within `sweep_s`: a rolling restart's queued
            # messages (in sessions it held, or accepted while stopping) are answered at once.
            # Lost, the sweep still finds them.
            try:
                await self.released()
            except Exception:
                log.warning("replicas.release_not_told", exc_info=True)
