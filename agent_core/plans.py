"""Plans with evidence and the goal lock: values, the storage port, and `PlanBook`, the rules
(seed 004's execute node): a step advances only with a `goal_check` stated from evidence; a
missing one is a correction round; three in a row end the run; abort says what was and was
not done. The goal and constraints are pinned verbatim into every request's volatile tail."""

from __future__ import annotations

import dataclasses
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

from agent_core.events import PlanProgress

PlanState = Literal["active", "done", "aborted", "failed"]
MAX_CORRECTIONS = 3
MIN_GOAL_CHECK_CHARS = 12
"""A goal_check shorter than this ("ok", "done") states no evidence."""
MAX_STEPS = 20
_PINNED_KEPT = 1024


@dataclass(frozen=True, slots=True)
class Step:
    title: str
    done_when: str
    evidence: str = ""
    """The goal_check that closed the step."""


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    session_key: str
    run_id: str
    steps: tuple[Step, ...]
    current: int = 0
    """0-based index of the step being worked on (== len(steps) when complete)."""
    state: PlanState = "active"
    corrections: int = 0
    """Consecutive advances refused for lack of evidence."""
    outcome: str = ""
    created_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))

    def progress(self) -> PlanProgress:
        index = min(self.current, len(self.steps) - 1)
        step = self.steps[index]
        return PlanProgress(self.id, index + 1, len(self.steps), step.title, step.done_when, self.state)

    def describe(self) -> str:
        """The plan as /plan shows it and as it is pinned for the model."""
        lines = []
        for i, step in enumerate(self.steps):
            mark = "✓" if i < self.current else ("▶" if i == self.current and self.state == "active" else "·")
            line = f"{mark} {i + 1}. {step.title} (done when: {step.done_when})"
            if step.evidence:
                line += f"\n     evidence: {step.evidence}"
            lines.append(line)
        head = {"active": "Plan", "done": "Plan (complete)", "aborted": "Plan (aborted)",
                "failed": "Plan (stopped)"}[self.state]  # fmt: skip
        text = f"{head}:\n" + "\n".join(lines)
        return f"{text}\n{self.outcome}" if self.outcome else text


@dataclass(frozen=True, slots=True)
class GoalLock:
    session_key: str
    goal: str
    constraints: tuple[str, ...] = ()
    reason: str = ""
    """Why it last changed (shown to the user when it did)."""

    def pinned(self) -> str:
        text = f"Goal (locked; change it only with the plan tool's set_goal and a reason):\n{self.goal}"
        if self.constraints:
            text += "\nConstraints:\n" + "\n".join(f"- {c}" for c in self.constraints)
        return text


class PlanStore(Protocol):
    async def active_plan(self, session_key: str) -> Plan | None:
        """The session's newest plan when it is still active."""
        ...

    async def latest_plan(self, session_key: str) -> Plan | None: ...

    async def save_plan(self, plan: Plan) -> None:
        """Insert or replace by id."""
        ...

    async def goal_lock(self, session_key: str) -> GoalLock | None: ...

    async def set_goal_lock(self, lock: GoalLock) -> None: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a plan action did: `text` is the tool result; `error` makes it a correction."""

    text: str
    error: bool = False
    progress: PlanProgress | None = None
    end: tuple[str, str, bool] | None = None
    """(reason, message shown to the user, failed) when the run must end."""


class PlanBook:
    """The plan rules over a `PlanStore`. Stateless between calls: everything is a row."""

    def __init__(self, store: PlanStore, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._store = store
        self._now = now
        # Pinned text per session, read on every model call: kept here so a turn costs no
        # query. Every write goes through this book (or `forget`), which drops the entry.
        self._pinned: OrderedDict[str, str] = OrderedDict()

    def forget(self, session_key: str) -> None:
        """The session's plan or goal changed outside the book (e.g. /new)."""
        self._pinned.pop(session_key, None)

    async def pinned(self, session_key: str) -> str:
        """The volatile tail's pinned block: goal lock and the active plan's current step."""
        text = self._pinned.get(session_key)
        if text is None:
            text = self._pinned[session_key] = await self._read_pinned(session_key)
            while len(self._pinned) > _PINNED_KEPT:
                self._pinned.popitem(last=False)
        else:
            self._pinned.move_to_end(session_key)
        return text

    async def _read_pinned(self, session_key: str) -> str:
        parts = []
        lock = await self._store.goal_lock(session_key)
        if lock is not None:
            parts.append(lock.pinned())
        plan = await self._store.active_plan(session_key)
        if plan is not None:
            step = plan.steps[plan.current]
            parts.append(
                f"{plan.describe()}\nCurrent step {plan.current + 1}/{len(plan.steps)}: {step.title}\n"
                f"Done when: {step.done_when}\nAdvance (plan action 'next') only when the results "
                "you have show this; state that evidence in goal_check."
            )
        return "\n\n".join(parts)

    async def create(
        self, session_key: str, run_id: str, steps: list[tuple[str, str]],
        goal: str | None, constraints: list[str] | None,
    ) -> Verdict:  # fmt: skip
        self.forget(session_key)
        if not steps:
            return Verdict("A plan needs at least one step, each with a done_when.", error=True)
        if len(steps) > MAX_STEPS:
            return Verdict(f"At most {MAX_STEPS} steps; merge some.", error=True)
        if any(not t.strip() or not d.strip() for t, d in steps):
            return Verdict("Every step needs a title and a done_when condition.", error=True)
        previous = await self._store.active_plan(session_key)
        if previous is not None:
            await self._store.save_plan(dataclasses.replace(
                previous, state="aborted", outcome="Replaced by a new plan.", updated_at=self._now()
            ))  # fmt: skip
        lock = await self._store.goal_lock(session_key)
        if goal and goal.strip() and (lock is None or lock.goal != goal.strip()):
            if lock is not None:
                return Verdict(
                    "A goal is already locked for this session; change it with action set_goal and a "
                    "reason (the user is told), or create the plan without a goal.", error=True,
                )  # fmt: skip
            await self._store.set_goal_lock(GoalLock(session_key, goal.strip(), _clean(constraints)))
        now = self._now()
        plan = Plan(uuid.uuid4().hex[:16], session_key, run_id, tuple(Step(t.strip(), d.strip()) for t, d in steps),
                    created_at=now, updated_at=now)  # fmt: skip
        await self._store.save_plan(plan)
        step = plan.steps[0]
        return Verdict(
            f"Plan created with {len(plan.steps)} steps. Work on step 1: {step.title} "
            f"(done when: {step.done_when}).",
            progress=plan.progress(),
        )

    async def advance(self, session_key: str, goal_check: str | None, summary: str | None = None) -> Verdict:
        self.forget(session_key)
        plan = await self._store.active_plan(session_key)
        if plan is None:
            return Verdict("There is no active plan; create one first (action create).", error=True)
        step = plan.steps[plan.current]
        check = (goal_check or "").strip()
        if len(check) < MIN_GOAL_CHECK_CHARS:
            return await self._correction(plan, step)
        current = plan.current + 1
        steps = tuple(dataclasses.replace(s, evidence=check) if i == plan.current else s
                      for i, s in enumerate(plan.steps))  # fmt: skip
        done = current >= len(steps)
        plan = dataclasses.replace(
            plan, steps=steps, current=current, corrections=0, state="done" if done else "active",
            outcome=(summary or "").strip() if done else "", updated_at=self._now(),
        )
        await self._store.save_plan(plan)
        if done:
            end = ("plan_done", summary.strip(), False) if summary and summary.strip() else None
            return Verdict(
                "Plan complete. " + ("" if end else "Now answer the user with a short summary of what was "
                                      "done, with the evidence."),
                progress=plan.progress(), end=end,
            )  # fmt: skip
        nxt = steps[current]
        return Verdict(
            f"Step {current} done. Now step {current + 1}/{len(steps)}: {nxt.title} (done when: {nxt.done_when}).",
            progress=plan.progress(),
        )

    async def _correction(self, plan: Plan, step: Step) -> Verdict:
        corrections = plan.corrections + 1
        failed = corrections >= MAX_CORRECTIONS
        plan = dataclasses.replace(
            plan, corrections=corrections, state="failed" if failed else "active", updated_at=self._now(),
            outcome=f"Stopped: step {plan.current + 1} was claimed done {corrections} times without evidence."
            if failed else "",
        )  # fmt: skip
        await self._store.save_plan(plan)
        if failed:
            message = (
                f"Stopped: I tried to mark step {plan.current + 1}/{len(plan.steps)} ({step.title}) as done "
                f"{corrections} times without stating evidence that “{step.done_when}”. Steps done: "
                f"{plan.current} of {len(plan.steps)}. Say 'continue' to try again, or tell me how to proceed."
            )
            return Verdict(message, error=True, progress=plan.progress(), end=("plan_corrections", message, True))
        return Verdict(
            f"Not advanced (correction {corrections}/{MAX_CORRECTIONS}): goal_check is missing or says "
            f"nothing. State, from the tool results you have, the evidence that “{step.done_when}” holds "
            "for the current step; if it does not hold yet, keep working on the step instead.",
            error=True,
        )

    async def update(self, session_key: str, steps: list[tuple[str, str]], reason: str | None) -> Verdict:
        """Replace the steps not yet done (the done ones and their evidence stay)."""
        self.forget(session_key)
        plan = await self._store.active_plan(session_key)
        if plan is None:
            return Verdict("There is no active plan; create one first (action create).", error=True)
        if not steps or any(not t.strip() or not d.strip() for t, d in steps):
            return Verdict("update needs the remaining steps, each with a title and done_when.", error=True)
        if not (reason or "").strip():
            return Verdict("update needs a reason (why the remaining steps change).", error=True)
        kept = plan.steps[: plan.current]
        new = kept + tuple(Step(t.strip(), d.strip()) for t, d in steps)
        if len(new) > MAX_STEPS:
            return Verdict(f"At most {MAX_STEPS} steps; merge some.", error=True)
        plan = dataclasses.replace(plan, steps=new, updated_at=self._now())
        await self._store.save_plan(plan)
        step = new[plan.current]
        return Verdict(f"Plan updated. Current step {plan.current + 1}/{len(new)}: {step.title}.",
                       progress=plan.progress())  # fmt: skip

    async def abort(self, session_key: str, done: str | None, not_done: str | None, why: str | None) -> Verdict:
        self.forget(session_key)
        if not (why or "").strip():
            return Verdict("abort needs `why` (and what was done and not done), for the user.", error=True)
        plan = await self._store.active_plan(session_key)
        message = (
            f"⛔ I stopped this task.\nDone: {(done or '').strip() or 'nothing yet'}\n"
            f"Not done: {(not_done or '').strip() or 'the rest of the task'}\nWhy: {why.strip()}"  # type: ignore[union-attr]
        )
        progress = None
        if plan is not None:
            plan = dataclasses.replace(plan, state="aborted", outcome=message, updated_at=self._now())
            await self._store.save_plan(plan)
            progress = plan.progress()
        return Verdict("Aborted; the user has been told.", progress=progress, end=("plan_aborted", message, False))

    async def set_goal(
        self, session_key: str, goal: str | None, constraints: list[str] | None, reason: str | None
    ) -> tuple[Verdict, GoalLock | None]:
        self.forget(session_key)
        if not (goal or "").strip():
            return Verdict("set_goal needs the new goal.", error=True), None
        if not (reason or "").strip():
            return Verdict("set_goal needs a reason; the user is shown it.", error=True), None
        lock = GoalLock(session_key, goal.strip(), _clean(constraints), reason.strip())  # type: ignore[union-attr]
        await self._store.set_goal_lock(lock)
        return Verdict("Goal changed; the user has been told."), lock


def _clean(items: list[str] | None) -> tuple[str, ...]:
    return tuple(i.strip() for i in items or () if i.strip())
