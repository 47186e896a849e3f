"""The runs other replicas hold: a button, an answer or a /stop that lands on this replica
for a run waiting on another reaches it there (over bot.signals), and this replica answers
the same for the others.

- An approval press (chat card or dashboard) whose run waits elsewhere is applied by the
  replica where it waits (`ApprovalGate.resolve_waiting`: its "Always" rule, its card); if
  no replica claims it, the run is gone and it is applied here, as one process would.
- An `ask_user` answer is stored in the question's row first; the replica whose run waits on
  it takes it from there (`QuestionDesk.take_answer`). It is resumed — a cut-off run
  continued — only when its run is alive nowhere: not claimed, and either not running or its
  session's lane held by no other replica.
- `/stop`, and a message in the `interrupt` queue mode, for a session whose lane another
  replica holds, stop that replica's run (it decides: never a job's, never one waiting on
  someone's answer); in a group, whoever asked for that run may /stop it from here too.
- `/queue` changes reach every replica's lanes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from sqlalchemy import text

from adapters.base import Adapter, NamesApprovers
from agent_core.approvals import ApprovalGate, Decision, ResolveOutcome
from bot.lanes import QUEUE_MODES
from bot.leadership import advisory_key
from bot.signals import Payload, Signals

if TYPE_CHECKING:
    from agent_core.questions import Question, QuestionDesk
    from bot.lanes import Lanes
    from bot.lane_claims import LaneClaims
    from bot.pending import Pending
    from bot.storage import Storage

log = logging.getLogger(__name__)

# Signal topics (bot.signals).
APPROVAL, QUESTION, STOP, STARTERS = "approval", "question", "stop", "starters"
INTERRUPT, MODE, RELEASED = "interrupt", "queue_mode", "lanes_released"

_LANE_HELD = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND classid = :hi AND objid = :lo AND objsubid = 1)"
)


class Elsewhere:
    """Implements `agent_core.approvals.DecisionRelay` and `agent_core.questions.AnswerRelay`."""

    def __init__(
        self, signals: Signals, storage: Storage, lanes: Lanes[Pending], claims: LaneClaims,
        gate: ApprovalGate, questions: QuestionDesk | None, adapters: Mapping[str, Adapter],
        run_starters: Mapping[str, frozenset[str]],
    ) -> None:  # fmt: skip
        self.signals = signals
        self.take_over: Callable[[str], Awaitable[bool]] | None = None
        """`bot.replicas.Replicas.take_over`: settle a session whose replica died."""
        self._adapters = adapters
        self._run_starters = run_starters
        self._storage = storage
        self._lanes = lanes
        self._claims = claims
        self._gate = gate
        self._questions = questions
        signals.serve(APPROVAL, self._decide_here)
        signals.serve(QUESTION, self._answer_here)
        signals.serve(STOP, self._stop_here)
        signals.serve(STARTERS, self._starters_here)
        signals.serve(INTERRUPT, self._interrupt_here)
        signals.serve(MODE, self._mode_here)
        signals.serve(RELEASED, self._released_here)
        self.on_released: Callable[[], None] | None = None
        """`bot.replicas.Replicas.wake`: look for sessions nobody holds now."""
        signals.on_recheck.append(gate.recheck)
        if questions is not None:
            signals.on_recheck.append(questions.recheck)

    # --- asked of the others -------------------------------------------------------
    async def decide_elsewhere(
        self, approval_id: str, decision: Decision, by: str, via: str | None
    ) -> ResolveOutcome | None:
        name = self._names(by).get(by)  # the card there says "by <name>", as it would here
        payload = {"id": approval_id, "decision": decision.value, "by": by, "via": via, "name": name}
        reply = await self.signals.call(APPROVAL, payload)
        if reply is None:
            log.info("approval.claimed_nowhere", extra={"approval": approval_id})
            return None
        return ResolveOutcome(reply["outcome"])

    async def answer_elsewhere(self, question: Question) -> bool:
        if await self.signals.call(QUESTION, {"id": question.id}) is not None:
            return True
        # Nobody claimed it: resumed only if its run is alive nowhere. A live run elsewhere
        # (a lost signal) takes the stored answer when it re-reads its row.
        run = await self._storage.get_run(question.run_id)
        cut = run is not None and run.status == "running"
        alive = cut and await self.lane_held_elsewhere(question.session_key)
        log.info("question.claimed_nowhere", extra={"question": question.id, "alive": alive})
        if cut and not alive and self.take_over is not None:
            # Its replica died holding the session (nobody has taken it over yet): settled
            # here first, as a restart would, then the answer continues the task here.
            await self.take_over(question.session_key)
        return alive

    async def stop(self, session_key: str) -> bool:
        """/stop for a session whose run another replica holds: whether one stopped it."""
        if not await self.lane_held_elsewhere(session_key):
            return False
        return await self.signals.call(STOP, {"key": session_key}) is not None

    async def starters(self, session_key: str) -> frozenset[str]:
        """Who asked for the session's run on another replica (in a group they may /stop it)."""
        if not await self.lane_held_elsewhere(session_key):
            return frozenset()
        reply = await self.signals.call(STARTERS, {"key": session_key})
        return frozenset(str(i) for i in (reply or {}).get("starters", ()))

    async def interrupt(self, session_key: str) -> None:
        """A message for a session another replica runs, in the interrupt mode."""
        await self.signals.publish(INTERRUPT, {"key": session_key})

    async def released(self) -> None:
        """This replica let its sessions go (a graceful stop): the others take them now."""
        await self.signals.publish(RELEASED, {})

    async def mode_changed(self, session_key: str, mode: str | None) -> None:
        await self.signals.publish(MODE, {"key": session_key, "mode": mode})

    def _names(self, identity: str) -> dict[str, str]:
        adapter = self._adapters.get(identity.partition(":")[0])
        return adapter.approver_names if isinstance(adapter, NamesApprovers) else {}

    async def lane_held_elsewhere(self, session_key: str) -> bool:
        if self._claims.holds(session_key) or self._lanes.active(session_key):
            return False
        key = advisory_key(f"lane:{session_key}") & 0xFFFF_FFFF_FFFF_FFFF
        async with self._storage.engine.connect() as conn:
            return bool(await conn.scalar(_LANE_HELD, {"hi": key >> 32, "lo": key & 0xFFFF_FFFF}))

    # --- answered for the others ---------------------------------------------------
    async def _decide_here(self, p: Payload) -> Payload | None:
        if isinstance(p.get("name"), str):
            self._names(p["by"])[p["by"]] = p["name"]
        outcome = await self._gate.resolve_waiting(p["id"], Decision(p["decision"]), p["by"], p.get("via"))
        return None if outcome is None else {"outcome": outcome.value}

    async def _answer_here(self, p: Payload) -> Payload | None:
        if self._questions is None or not await self._questions.take_answer(p["id"]):
            return None
        return {"taken": True}

    async def _stop_here(self, p: Payload) -> Payload | None:
        return {"stopped": True} if self._lanes.stop(p["key"]) else None

    async def _starters_here(self, p: Payload) -> Payload | None:
        starters = self._run_starters.get(p["key"])
        return None if starters is None else {"starters": sorted(starters)}

    async def _interrupt_here(self, p: Payload) -> Payload | None:
        key = p["key"]
        held = self._questions is not None and self._questions.waiting_in(key)
        if self._lanes.mode_of(key) == "interrupt" and not held:
            self._lanes.interrupt(key)
        return None

    async def _released_here(self, p: Payload) -> Payload | None:
        if self.on_released is not None:
            self.on_released()
        return None

    async def _mode_here(self, p: Payload) -> Payload | None:
        mode = p.get("mode")
        self._lanes.set_mode(p["key"], mode if mode in QUEUE_MODES else None)
        return None
