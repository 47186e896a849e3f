"""The verbs every surface uses: chat commands, the CLI and the dashboard are thin callers.

Each verb takes an `Actor` and checks its role once, here; it then acts through storage and
the live objects of a running process (the approval gate, the scheduler, the lanes, the
breakers) when there is one — the CLI has only storage, and says so where it matters."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent_core.approvals import Decision, ResolveResult
from agent_core.compaction import CompactionRecord
from agent_core.plans import GoalLock, Plan
from agent_core.policy import Grant
from agent_core.ports import ApprovalRecord, AuditEntry
from bot.operations import grants as grant_texts
from bot.operations.actor import Actor
from bot.roles import AccessManager, AccessTarget, Role
from bot.storage import Storage
from bot.storage.audit import AuditRow
from bot.storage.browse import RunTimeline, SessionSummary
from bot.storage.jobs import JobRow
from bot.storage.metrics import MetricsTotals
from bot.storage.records import PairedUser, PairingRequest, RunRow, SessionUsage

if TYPE_CHECKING:
    from agent_core.approvals import ApprovalGate
    from agent_core.breaker import Breakers
    from bot.lanes import Lanes
    from bot.live_config import LiveConfig
    from bot.scheduling.scheduler import Scheduler

JobOp = Literal["run", "pause", "resume", "cancel"]
PAGE = 50


@dataclass(frozen=True, slots=True)
class AuditQuery:
    session_key: str | None = None
    actor: str | None = None
    tool: str | None = None
    decision: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = 100


@dataclass(frozen=True, slots=True)
class AccessListing:
    owners: Sequence[str]
    approvers: Sequence[str]
    paired: list[PairedUser]
    config_groups: Mapping[str, Sequence[str]]
    runtime_groups: list[tuple[str, str, datetime]]
    pending: list[PairingRequest]


@dataclass(frozen=True, slots=True)
class LaneState:
    session_key: str
    running: bool
    queued: int


@dataclass(frozen=True, slots=True)
class BudgetLine:
    session_key: str
    tokens_today: int
    budget: int
    """0: unlimited (or the owner's exempt main session)."""


@dataclass(frozen=True, slots=True)
class BreakerView:
    model: str
    state: str
    failures: int
    retry_in_s: float | None
    last_error: str


@dataclass(frozen=True, slots=True)
class Overview:
    platforms: list[str]
    breakers: list[BreakerView]
    lanes: list[LaneState]
    running_runs: int
    waiting_messages: int
    pending_approvals: int
    today: MetricsTotals
    budgets: list[BudgetLine]
    services: list[ServiceState] = field(default_factory=list)
    """MCP servers and speech engines, as `roost doctor` names them."""


@dataclass(frozen=True, slots=True)
class ServiceState:
    """One MCP server or speech engine: its name, kind, state and what went wrong last."""

    name: str
    kind: str
    state: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PolicyView:
    config_file: str
    last_reload_error: str | None
    policy: dict[str, Any]
    limits: dict[str, Any]
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionPlace:
    """A chat session and where it lives, to create its row on first write."""

    session_key: str
    scope: str
    platform: str
    chat_id: str


@dataclass(frozen=True, slots=True)
class SessionStatus:
    model_override: str | None
    totals: SessionUsage
    transcript: list[dict[str, Any]]
    """The current epoch's messages as stored (not repaired)."""
    compaction: tuple[CompactionRecord | None, CompactionRecord | None]
    """`Storage.compaction_state`: passed to agent_core.compaction.describe as is."""
    grants: int


@dataclass
class Live:
    """What a running `roost run` adds to storage; every field is optional (the CLI has none)."""

    gate: ApprovalGate | None = None
    scheduler: Scheduler | None = None
    breakers: Breakers | None = None
    lanes: Lanes[Any] | None = None
    live_config: LiveConfig | None = None
    platforms: Callable[[], list[str]] = field(default=lambda: [])
    services: Callable[[], list[ServiceState]] = field(default=lambda: [])


class Operations:
    def __init__(
        self,
        storage: Storage,
        *,
        owners: Collection[str],
        approvers: Collection[str] = (),
        config_groups: Mapping[str, Collection[str]] | None = None,
        workspace: Path | None = None,
        settings_view: Callable[[], dict[str, Any]] = dict,
        live: Live | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        access: AccessManager | None = None,
    ) -> None:
        self.storage = storage
        self.owners = list(owners)
        self.approvers = list(approvers)
        self.config_groups = {p: list(ids) for p, ids in (config_groups or {}).items()}
        # A running process passes the AccessManager its chats already use (one place decides).
        self.access = access or AccessManager(
            storage, storage, owners=owners, approvers=approvers, config_groups=self.config_groups
        )
        self.workspace = workspace
        self._settings_view = settings_view
        self.live = live or Live()
        self._now = now

    # -- approvals -------------------------------------------------------------------
    async def pending_approvals(self, actor: Actor) -> list[ApprovalRecord]:
        actor.require(Role.APPROVER, "see pending approvals")
        rows = await self.storage.pending_approvals()
        return sorted(rows, key=lambda r: r.created_at)

    async def decide(self, actor: Actor, approval_id: str, decision: Decision) -> ResolveResult:
        """The same path as a chat card's button (ApprovalGate.resolve): one row, decided once."""
        actor.require(Role.APPROVER, "decide approvals")
        if self.live.gate is None:
            raise RuntimeError("approvals are decided in the running `roost run` process")
        via = None if actor.via == "chat" else actor.via
        return await self.live.gate.resolve(approval_id, decision, actor.identity, via=via)

    async def press(self, actor: Actor, approval_id: str, decision: Decision) -> ResolveResult:
        """A chat card's button: the same path as `decide`, but who may press is the gate's
        own check (owners and configured approvers), whose refusal the card answers with
        "not yours" (audited) instead of an error."""
        if self.live.gate is None:
            raise RuntimeError("approvals are decided in the running `roost run` process")
        return await self.live.gate.resolve(approval_id, decision, actor.identity)

    # -- grants ----------------------------------------------------------------------
    async def grants(self, actor: Actor, session_key: str | None = None) -> list[Grant]:
        actor.require(Role.OWNER, "list 'always allow' rules")
        return await self.storage.grants(session_key)

    async def revoke_grant(self, actor: Actor, raw_id: str) -> str:
        actor.require(Role.OWNER, "revoke 'always allow' rules")
        return await grant_texts.revoke(self.storage, raw_id, actor.identity)

    # -- access ----------------------------------------------------------------------
    async def access_listing(self, actor: Actor) -> AccessListing:
        actor.require(Role.OWNER, "list who has access")
        return AccessListing(
            self.owners, self.approvers, await self.storage.paired_users(), self.config_groups,
            await self.storage.runtime_groups(), await self.storage.list_pending_pairings(),
        )  # fmt: skip

    async def allow(self, actor: Actor, target: AccessTarget) -> str:
        actor.require(Role.OWNER, "allow users or groups")
        return await self.access.allow(target, actor.identity)

    async def revoke_access(self, actor: Actor, target: AccessTarget) -> str:
        actor.require(Role.OWNER, "revoke access")
        return await self.access.revoke(target, actor.identity)

    async def pending_pairings(self, actor: Actor) -> list[PairingRequest]:
        actor.require(Role.OWNER, "see pairing requests")
        return await self.storage.list_pending_pairings()

    async def approve_pairing(self, actor: Actor, platform: str, code: str) -> PairedUser | None:
        """Pair whoever asked with `code` (audited); None when no such code is pending."""
        actor.require(Role.OWNER, "approve pairing codes")
        paired = await self.storage.approve_pairing(platform, code.strip().upper())
        if paired is not None:
            await self.storage.audit(
                AuditEntry(kind="pairing", actor=actor.identity, subject=f"{platform}:{paired.user_id}",
                           decision="approved")  # fmt: skip
            )
        return paired

    # -- jobs ------------------------------------------------------------------------
    async def jobs(self, actor: Actor, session_key: str | None = None, *, include_ended: bool = False) -> list[JobRow]:
        actor.require(Role.OWNER, "manage scheduled jobs")
        return await self.storage.list_jobs(session_key, include_ended=include_ended)

    async def operate_job(self, actor: Actor, op: JobOp, job_id: str) -> tuple[bool, str]:
        """(done, what to tell the person). With a running scheduler every op works; from the
        CLI (storage only) cancel and pause do, Run now needs `roost run`."""
        actor.require(Role.OWNER, "manage scheduled jobs")
        job_id = job_id.strip()
        if self.live.scheduler is not None:
            job = await self.storage.get_job(job_id)
            answer = await self.live.scheduler.operate(op, job_id)
            return job is not None and job.state != "cancelled", answer
        job = await self.storage.get_job(job_id)
        if job is None or job.state == "cancelled":
            return False, f"No job {job_id!r} (see roost jobs list)."
        match op:
            case "cancel":
                await self.storage.set_job_state(job.id, "cancelled")
                return True, f"Cancelled {job.id} “{job.name}” ({job.session_key}); it will not run again."
            case "pause" if job.state == "active":
                await self.storage.set_job_state(job.id, "paused")
                return True, f"⏸ Paused “{job.name}”."
        return False, f"{op} needs the running `roost run` process."

    # -- audit -----------------------------------------------------------------------
    async def audit(self, actor: Actor, query: AuditQuery) -> list[AuditRow]:
        actor.require(Role.OWNER, "read the audit trail")
        return await self.storage.audit_entries(
            session_key=query.session_key, since=query.since, until=query.until, limit=query.limit,
            actor=query.actor, subject=query.tool, decision=query.decision, kind=query.kind,
        )  # fmt: skip

    async def export_audit(self, actor: Actor, query: AuditQuery, fmt: Literal["json", "csv"]) -> str:
        return export_rows(await self.audit(actor, query), fmt)

    # -- usage, runs, sessions -------------------------------------------------------
    async def usage_text(self, actor: Actor, now: datetime, *, session_key: str | None) -> str:
        """/usage and `roost usage`: every session from `usage_windows` (the dashboard's
        figures), or one session, which its members may see."""
        from bot.usage_report import usage_text, windows_text

        if session_key is None:
            return windows_text(await self.usage_windows(actor, now))
        actor.require(Role.MEMBER, "see this session's usage")
        return await usage_text(self.storage, now, session_key=session_key)

    async def usage_windows(self, actor: Actor, now: datetime) -> dict[str, tuple[MetricsTotals, dict[str, MetricsTotals]]]:
        """Today and this week: (total, per session) — the figures /usage prints."""
        actor.require(Role.OWNER, "see every session's usage")
        from bot.usage_report import Windows

        windows = Windows.at(now)
        out = {}
        for label, since in (("Today", windows.today), ("This week", windows.week)):
            out[label] = (await self.storage.metrics_totals(since), await self.storage.metrics_by_session(since))
        return out

    async def usage_by_day(self, actor: Actor, now: datetime, days: int = 14) -> list[tuple[str, MetricsTotals]]:
        """Per local day, oldest first (the dashboard's chart)."""
        actor.require(Role.OWNER, "see every session's usage")
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        starts = [midnight - timedelta(days=back) for back in range(days - 1, -1, -1)]
        totals = await self.storage.metrics_in_buckets([*starts, starts[-1] + timedelta(days=1)])
        return [(start.strftime("%Y-%m-%d"), t) for start, t in zip(starts, totals, strict=True)]

    async def usage_by_model(self, actor: Actor, since: datetime) -> dict[str, MetricsTotals]:
        actor.require(Role.OWNER, "see every session's usage")
        return await self.storage.metrics_by_model(since)

    async def sessions(self, actor: Actor, page: int = 0) -> list[SessionSummary]:
        actor.require(Role.OWNER, "browse sessions")
        return await self.storage.session_summaries(limit=PAGE, offset=max(page, 0) * PAGE)

    async def runs(
        self, actor: Actor, *, session_key: str | None = None, search: str | None = None, page: int = 0
    ) -> list[RunRow]:
        actor.require(Role.OWNER, "browse runs")
        return await self.storage.runs_page(
            session_key=session_key, search=search or None, limit=PAGE, offset=max(page, 0) * PAGE
        )

    async def run_timeline(self, actor: Actor, run_id: str) -> RunTimeline | None:
        actor.require(Role.OWNER, "read a run's timeline")
        return await self.storage.run_timeline(run_id)

    async def status_counts(self, actor: Actor) -> tuple[int, int]:
        """(runs going on, messages waiting), from the database."""
        actor.require(Role.OWNER, "see what is running")
        running = await self.storage.runs_left_running()
        waiting = await self.storage.inbox_rows({"received", "queued"})
        return len(running), len(waiting)

    # -- one chat session, for its members --------------------------------------------
    # The chat checked the route (who may write in this session) before calling; these verbs
    # act on that one session only, so any member may use them.
    async def session_status(self, actor: Actor, session_key: str) -> SessionStatus:
        """What /status shows about a session, read from storage."""
        actor.require(Role.MEMBER, "see this session's status")
        session = await self.storage.get_session(session_key)
        transcript = await self.storage.load_transcript(session_key)
        return SessionStatus(
            model_override=session.model_override if session else None,
            totals=await self.storage.usage_for_session(session_key),
            transcript=transcript,
            compaction=await self.storage.compaction_state(session_key),
            grants=await self.storage.count_grants(session_key),
        )

    async def session_model(self, actor: Actor, session_key: str) -> str | None:
        """The session's model override (None: the first configured model)."""
        actor.require(Role.MEMBER, "see this session's model")
        session = await self.storage.get_session(session_key)
        return session.model_override if session else None

    async def set_session_model(self, actor: Actor, place: SessionPlace, model: str | None) -> None:
        actor.require(Role.MEMBER, "choose this session's model")
        await self._ensure(place)
        await self.storage.set_model(place.session_key, model)

    async def new_epoch(self, actor: Actor, place: SessionPlace) -> None:
        """/new: the session's next run sees none of the earlier messages."""
        actor.require(Role.MEMBER, "start a fresh session")
        await self._ensure(place)
        await self.storage.new_epoch(place.session_key)

    async def clear_session_grants(self, actor: Actor, session_key: str) -> int:
        """/new: 'always allow' was given for the conversation that ended, not forever."""
        actor.require(Role.MEMBER, "reset this session's 'always allow' rules")
        return await self.storage.clear_grants(session_key)

    async def voice_replies(self, actor: Actor, session_key: str) -> bool:
        actor.require(Role.MEMBER, "see this session's voice setting")
        return await self.storage.voice_replies(session_key)

    async def set_voice_replies(self, actor: Actor, place: SessionPlace, on: bool) -> None:
        actor.require(Role.MEMBER, "change this session's voice setting")
        await self._ensure(place)
        await self.storage.set_voice_replies(place.session_key, on)

    async def set_queue_mode(self, actor: Actor, place: SessionPlace, mode: str | None) -> None:
        """Stored only; the caller also tells its lanes (bot.queue_modes)."""
        actor.require(Role.MEMBER, "change this session's queue mode")
        await self._ensure(place)
        await self.storage.set_queue_mode(place.session_key, mode)

    async def session_jobs(self, actor: Actor, session_key: str) -> list[JobRow]:
        """One session's jobs, for its members (every session's: `jobs`, owner only)."""
        actor.require(Role.MEMBER, "list this session's scheduled jobs")
        return await self.storage.list_jobs(session_key)

    async def plan_state(self, actor: Actor, session_key: str) -> tuple[Plan | None, GoalLock | None]:
        """/plan: the session's latest plan and its goal lock."""
        actor.require(Role.MEMBER, "see this session's plan")
        return await self.storage.latest_plan(session_key), await self.storage.goal_lock(session_key)

    async def end_conversation(self, actor: Actor, session_key: str) -> None:
        """/new: the goal lock, the active plan and a question left pending (e.g. by a
        restart) belong to the conversation that ended."""
        actor.require(Role.MEMBER, "start a fresh session")
        await self.storage.clear_goal_lock(session_key)
        plan = await self.storage.active_plan(session_key)
        if plan is not None:
            await self.storage.save_plan(dataclasses.replace(plan, state="aborted", outcome="Ended by /new."))
        question = await self.storage.pending_question(session_key)
        if question is not None:
            await self.storage.close_question(question.id, "cancelled", None, None)

    async def _ensure(self, place: SessionPlace) -> None:
        await self.storage.ensure_session(place.session_key, place.scope, place.platform, place.chat_id)

    # -- groups allowed from inside the group ----------------------------------------
    async def allow_group_here(self, actor: Actor, platform: str, chat_id: str) -> None:
        """The owner's /allow in a group (the chat audits it, as before)."""
        actor.require(Role.OWNER, "change where I answer")
        await self.storage.allow_group(platform, chat_id)

    async def disallow_group_here(self, actor: Actor, platform: str, chat_id: str) -> None:
        actor.require(Role.OWNER, "change where I answer")
        await self.storage.disallow_group(platform, chat_id)

    async def record(self, entry: AuditEntry) -> None:
        """Write what happened to the audit trail. Not a verb anyone is allowed or refused:
        the trail records strangers' denied attempts too."""
        await self.storage.audit(entry)

    # -- views of the running process ------------------------------------------------
    def breakers(self, actor: Actor) -> list[BreakerView]:
        actor.require(Role.OWNER, "see the model breakers")
        if self.live.breakers is None:
            return []
        return [
            BreakerView(s.model, s.state, s.failures, s.retry_in_s, s.last_error)
            for s in self.live.breakers.statuses()
        ]

    def policy(self, actor: Actor) -> PolicyView:
        actor.require(Role.OWNER, "see the policy in effect")
        lc = self.live.live_config
        if lc is None:
            return PolicyView("", None, {}, {}, self._settings_view())
        return PolicyView(
            str(lc.path), lc.last_error, lc.policy_settings.model_dump(mode="json"),
            lc.limits.model_dump(mode="json"), self._settings_view(),
        )  # fmt: skip

    async def budgets(self, actor: Actor, now: datetime) -> list[BudgetLine]:
        """Each session's tokens today against its daily budget ([limits], as in effect)."""
        actor.require(Role.OWNER, "see every session's usage")
        from agent_core.risk import Scope
        from bot.session_keys import scope_of
        from bot.usage_report import Windows

        limits = self.live.live_config.limits if self.live.live_config is not None else None
        budgets = []
        for key, totals in (await self.storage.metrics_by_session(Windows.at(now).today)).items():
            budget = 0
            if limits is not None:
                main = scope_of(key) is Scope.MAIN
                if not (main and limits.owner_exempt):
                    budget = (limits.group if key.startswith("group:") else limits.user).daily_tokens
            budgets.append(BudgetLine(key, totals.input_tokens + totals.output_tokens, budget))
        return budgets

    async def overview(self, actor: Actor, now: datetime) -> Overview:
        actor.require(Role.OWNER, "see the overview")
        from bot.usage_report import Windows

        lanes = self.live.lanes.depths() if self.live.lanes is not None else {}
        running, waiting = await self.status_counts(actor)
        today = Windows.at(now).today
        budgets = await self.budgets(actor, now)
        if self.live.breakers is not None:
            await self.live.breakers.refresh()  # every replica's findings
        return Overview(
            platforms=self.live.platforms(),
            breakers=self.breakers(actor),
            lanes=[LaneState(k, r, q) for k, (r, q) in sorted(lanes.items())],
            running_runs=running,
            waiting_messages=waiting,
            pending_approvals=len(await self.storage.pending_approvals()),
            today=await self.storage.metrics_totals(today),
            budgets=budgets,
            services=self.live.services(),
        )

    # -- memory (main only, read-only) -----------------------------------------------
    def memory_files(self, actor: Actor) -> list[tuple[str, str]]:
        """(name, text) of USER.md, MEMORY.md and the daily logs, newest log first."""
        actor.require(Role.OWNER, "read the main session's memory")
        if self.workspace is None:
            return []
        from workspace.daily_log import log_dir_for

        root = self.workspace
        files = [root / "USER.md", root / "MEMORY.md"]
        log_dir = root / log_dir_for("main")  # main's own logs only: never a group's or a DM's
        logs = sorted(log_dir.glob("????-??-??.md"), reverse=True)[:14] if log_dir.is_dir() else []
        out = []
        for path in [*files, *logs]:
            if path.is_file() and not path.is_symlink():
                out.append((str(path.relative_to(root)), path.read_text(errors="replace")))
        return out


def export_rows(rows: Sequence[AuditRow], fmt: Literal["json", "csv"]) -> str:
    records = [{**dataclasses.asdict(r), "at": r.at.isoformat()} for r in rows]
    if fmt == "json":
        return json.dumps(records, ensure_ascii=False, indent=1)
    out = io.StringIO()
    names = [f.name for f in dataclasses.fields(AuditRow)]
    writer = csv.DictWriter(out, fieldnames=names)
    writer.writeheader()
    for record in records:
        # A cell starting with = + - @ is a formula to a spreadsheet: quote it as text.
        writer.writerow({k: _no_formula(v) for k, v in record.items()})
    return out.getvalue()


def _no_formula(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def audit_entry(actor: Actor, **fields: Any) -> AuditEntry:
    return AuditEntry(actor=actor.identity, **fields)
