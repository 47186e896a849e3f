"""Where an accepted message becomes a run: de-duplication, routing, commands, lanes, and
the reply sink of the platform it came from. Implements `adapters.base.InboundHandler`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from adapters.base import Adapter, ButtonAnswer, Delivery, SendsNotices, Taken
from adapters.catch_up import ChannelCursors
from adapters.lead import Leads
from agent_core.approvals import ApprovalGate, Decision, ResolveResult
from agent_core.events import RunFailed, RunFinished, RunStarted
from agent_core.inbound import Inbound, ReplyTarget
from agent_core.llm import ModelListing
from agent_core.models import ModelTable
from agent_core.loop import AgentLoop, RunRequest
from agent_core.ports import ApprovalRecord
from agent_core.text import clean_text
from bot.commands import parse_command
from bot.command_handlers import CommandHandlers
from bot import queue_modes, resume
from bot.operations import chat_actor
from bot.pending import Pending
from bot.registry import Registry
from bot.lanes import LaneFull, Lanes, LanesClosed
from bot.messenger import AdapterMessenger
from bot.ratelimits import RateLimiter
from bot.run_metrics import Metrics, owner_notifier
from bot.roles import AccessManager, IsAdmin
from bot.router import Accept, Buffered, Ignored, NeedsPairing, Router
from bot import structured
from bot.scheduling.refs import JobRef, job_ref
from bot.session_keys import scope_of
from bot.storage import Storage
from bot.storage.inbox import InboxMessage, InboxRow
from bot.turn_content import ALBUM_SETTLE_S, gather_album, turn_content, with_media
from bot.voice_reply import send_voice_reply, spoke
from workspace.context import LogCutoffs
from workspace.daily_log import append_run_entry

if TYPE_CHECKING:
    from bot.media import MediaIntake
    from bot.tts import OpenAISpeech
    from bot.replicas import Replicas
    from bot.elsewhere import Elsewhere
    from agent_core.plans import PlanBook
    from agent_core.questions import Question, QuestionDesk
    from agent_core.workers import WorkerPool
    from agent_core.breaker import Breakers
    from bot.scheduling.runs import JobRuns

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_INBOUND_CHARS = 50_000
KEPT_NOTICE = "⏳ I'm restarting; I'll answer what you sent as soon as I'm back."


def cleaned(inbound: Inbound) -> Inbound:
    """The inbound with text safe to store and send (a lone surrogate stored once fails
    every later request of the session); the same object when nothing needed cleaning."""
    text, name = clean_text(inbound.text), clean_text(inbound.sender_name)
    if text is inbound.text and name is inbound.sender_name:
        return inbound
    return dataclasses.replace(inbound, text=text, sender_name=name)


class Conversations:
    def __init__(
        self,
        *,
        storage: Storage,
        router: Router,
        agent: AgentLoop,
        gate: ApprovalGate,
        adapters: Mapping[str, Adapter],
        workspace: Path,
        models: list[str],
        catalogue: Callable[[], Awaitable[list[ModelListing]]] | None = None,
        prices: ModelTable | None = None,
        queue_mode: str = "collect",
        max_concurrent_runs: int = 16,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        limiter: RateLimiter | None = None,
        access: AccessManager | None = None,
        is_group_admin: IsAdmin | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.storage = storage
        self.router = router
        self.agent = agent
        self.gate = gate
        self.adapters = dict(adapters)
        self.workspace = workspace
        self.models = models
        self.catalogue = catalogue
        self.prices = prices
        """What the model endpoint offers (GET /v1/models), for /model."""
        self._now = now
        self.limiter = limiter
        self.access = access
        self.is_group_admin = is_group_admin
        self.registry = registry or Registry()
        """The commands and button actions features plugged in (bot.features builds Roost's)."""
        self.run_starters: dict[str, frozenset[str]] = {}
        """Who asked for each session's running run: in a group, they may /stop it."""
        self.lanes: Lanes[Pending] = Lanes(
            self._run_batch, mode=queue_mode, max_concurrent=max_concurrent_runs  # type: ignore[arg-type]
        )
        self.commands = CommandHandlers(self)
        self.operations = self.commands.operations
        """The operations layer as chat calls it (bot.operations), with this process's gate and lanes."""
        self.metrics = Metrics(storage, now=now, prices=prices)
        """Run metrics and anomalies (bot.run_metrics); its clocks are injectable."""
        self._backlog: list[InboxRow] = []
        self._replayed = asyncio.Event()
        """Cleared while a start-up backlog waits: new messages queue behind it."""
        self._replayed.set()
        self._closing = False
        self._finishing: set[asyncio.Task[Any]] = set()
        """A run's closing work, shielded from its cancellation; `aclose` waits for it."""
        self.jobs: JobRuns | None = None
        """Scheduled jobs' run hooks (set by bot.app)."""
        self.questions: QuestionDesk | None = None
        """ask_user's pending questions (set by bot.app); a reply answers before any lane."""
        self.workers: WorkerPool | None = None
        """Workers spawned by runs (set by bot.app); a run's workers end with it."""
        self.plans: PlanBook | None = None
        """Plans and goal locks (set by bot.app): /new ends them."""
        self.log_cutoffs: LogCutoffs | None = None
        """Where the prompt's copy of today's log stops (set by bot.app): /new resets it."""
        self.breakers: Breakers | None = None
        """The process's model circuit breakers, for /status (set by bot.app)."""
        self.channel_cursors: ChannelCursors | None = None
        """Where each Discord channel was left, for catching up after a gap (set by bot.app)."""
        self.leads: Leads | None = None
        """Replicas: who holds a bot's one connection (set by bot.app; adapters.lead)."""
        self.mcp_states: Callable[[], list[Any]] | None = None
        """MCP servers' states (bot.mcp_servers.ServerState), for the owner's /status."""
        self.media: MediaIntake | None = None
        """Attachments → content (set by bot.app; None: attachments are ignored)."""
        self.speech: OpenAISpeech | None = None
        """Text to speech for `/voice on` (set by bot.app; None: not configured)."""
        self.album_settle_s = ALBUM_SETTLE_S
        self.deferred: dict[str, list[Pending]] = {}
        """Messages whose voice note could not be transcribed, per session: they join the
        session's next run or /retry (their inbox rows stay queued, so a restart retries)."""
        self.replicas: Replicas | None = None
        """Set when other replicas may serve the database (bot.replicas): lanes are claimed."""
        self.elsewhere: Elsewhere | None = None
        """With replicas: /stop and interrupts for runs another replica holds (bot.elsewhere)."""

    # --- InboundHandler -------------------------------------------------------------
    async def receive(self, inbound: Inbound) -> bool:
        """Store, then route, then acknowledge. True when the message waits for a run."""
        taken = await self.take(inbound)
        return False if taken is None else await self.handle(taken)

    async def take(self, inbound: Inbound) -> Taken | None:
        """Store durably; None for a duplicate (see `adapters.base.InboundHandler.take`)."""
        inbound = cleaned(inbound)
        if self.replicas is not None:  # the row is this replica's to route while it lives
            await self.replicas.identify()
        # Durable first: the update is marked seen in the transaction that stores the
        # message, so nothing marked seen can be lost by a crash (see bot.storage.inbox).
        inbox_id = await self.storage.receive_inbound(InboxMessage.of(inbound))
        if inbox_id is None:
            log.info("inbound.duplicate", extra={"platform": inbound.platform, "update": inbound.update_id})
            return None
        return Taken(inbound, inbox_id)

    async def handle(self, taken: Taken) -> bool:
        """Route a taken message; True when it waits for a run."""
        await self._replayed.wait()  # at start-up, what the last process left goes first
        return await self._handle(taken.inbound, taken.inbox_id)

    async def _handle(self, inbound: Inbound, inbox_id: int) -> bool:
        """Route a stored message; its inbox row stays only while it waits for a run.

        With replicas, every step on the row holds only while it is still this replica's
        to route: one whose lock connection dropped may find that another replica adopted
        the row meanwhile (and answered it), and then leaves it alone."""
        routed = self.replicas is not None
        if routed and not await self.storage.route_received(inbox_id):
            log.info("inbox.routed_elsewhere", extra={"inbox": inbox_id})
            return False
        try:
            kept = await self._route(inbound, inbox_id)
        except asyncio.CancelledError:
            raise  # left "received": the next start routes it again
        except BaseException:
            await self.storage.discard_inbound(inbox_id, routed=routed)  # never replay a message that crashes us
            raise
        if not kept:
            await self.storage.discard_inbound(inbox_id, routed=routed)
        return kept

    async def _route(self, inbound: Inbound, inbox_id: int) -> bool:
        command = parse_command(inbound.text)
        if command and inbound.chat_kind == "group" and await self.commands.group_admin(command, inbound):
            return False
        route = await self.router.route(inbound)
        match route:
            case NeedsPairing(code=code, new=new, tell_sender=tell_sender):
                if tell_sender:  # audited as often as told: a flooding stranger adds no rows
                    await self.commands.audit_stranger(inbound, code)
                    await self._notify(inbound, self.commands.pairing_text(code))
                if code is not None and new:  # once per code, however often the stranger writes
                    await self.commands.tell_owner_about_pairing(inbound, code)
            case Ignored(reason=reason):
                if inbound.mentioned:  # someone addressed the bot: a denial worth recording
                    await self.commands.audit_access(inbound, "group", "denied", detail=reason)
                return False
            case Buffered():
                return False
            case Accept():
                route = await resume.session_of(self, inbound, route)  # Continue: the run's own session
                if command is not None:
                    await self._notify(inbound, await self.commands.run(command, inbound, route))
                    return False
                if self.questions is not None and inbound.text.strip():
                    # The addressee's reply to a pending ask_user resumes that run, never a new one.
                    if await self.questions.answer(route.session_key, inbound.identity, inbound.text) != "none":
                        return False
                if self.limiter is not None:  # rate limits and the daily token budget
                    limited = await self.limiter.check(inbound, route.session_key, is_owner=route.is_owner)
                    if limited is not None:
                        if limited.notice is not None:  # told once per window
                            await self._notify(inbound, limited.notice)
                        return False
                return await self._accept(inbound, route, inbox_id)
        return False

    async def decide(self, approval_id: str, decision: Decision, identity: str) -> ResolveResult:
        return await self.operations.press(chat_actor(identity, is_owner=False), approval_id, decision)

    async def approve_pairing(self, platform: str, code: str, identity: str) -> str:
        return await self.commands.approve_pairing(platform, code, identity)

    async def press_button(self, platform: str, action: str, identity: str) -> ButtonAnswer:
        return await self.registry.press(self, action, identity)

    async def resume_question(self, question: Question, answer: str, identity: str) -> None:
        """A question answered after a restart: the answer goes into the stored transcript
        and a run continues the task in the session's lane."""
        stored = await structured.answer_into_transcript(self, question, answer, identity)
        text = structured.RESUMED_NOTE if stored else structured.answer_text(question, answer)
        pending = await structured.resumed_pending(self, question, identity, text)
        if pending is not None:
            await self._submit(pending, acknowledge=False)

    async def record_delivery(self, delivery: Delivery) -> None:
        await self.storage.record_delivery(
            delivery.run_id,
            delivery.part_index,
            platform=delivery.platform,
            chat_id=delivery.chat_id,
            text=delivery.text,
            state=delivery.state,
            message_id=delivery.message_id,
            thread_id=delivery.thread_id,
        )

    async def note_approval_card(self, approval_id: str, chat_ref: str) -> None:
        await self.storage.set_approval_chat_ref(approval_id, chat_ref)

    async def close_expired_cards(self, records: list[ApprovalRecord]) -> None:
        """At start-up, after adapters connect: cards of approvals the old process left
        pending lose their buttons and say they expired."""
        for record in records:
            platform = (record.chat_ref or "").partition(":")[0]
            adapter = self.adapters.get(platform)
            if adapter is None:
                continue
            try:
                await adapter.close_expired_card(dataclasses.replace(record, state="expired"))
            except Exception:
                log.warning("approval.card_close_failed", extra={"approval": record.id}, exc_info=True)

    async def recover_deliveries(self, run_ids: set[str] | None = None) -> int:
        """At start-up: replies a previous process left mid-stream are marked as cut off in
        place, on the message that already shows them. With replicas, only those of the
        runs `run_ids` (a session taken over from a dead replica): the others are live."""
        if self.replicas is not None and run_ids is None:
            return 0
        count = 0
        for row in await self.storage.unfinished_deliveries():
            if run_ids is not None and row.run_id not in run_ids:
                continue
            adapter = self.adapters.get(row.platform)
            if adapter is None:
                continue
            delivery = Delivery(row.run_id, row.part_index, row.platform, row.chat_id, row.thread_id,
                                row.message_id, row.text, row.state)
            try:
                await adapter.mark_interrupted(delivery)
                await self.record_delivery(dataclasses.replace(delivery, state="final"))
                count += 1
            except Exception:
                log.warning("delivery.recover_failed", extra={"run": row.run_id}, exc_info=True)
        await resume.offer(self)  # each run a crash cut off: one offer to continue, ever
        return count

    # --- the inbox at start-up -----------------------------------------------------
    async def load_inbox(self) -> int:
        """Start-up, before adapters deliver anything: settle what the previous process
        left in the inbox and hold new messages until `replay_inbox` has handed it on.
        Returns how many messages wait."""
        if self.replicas is not None:  # other replicas' rows are live: settled per session
            return 0
        self._backlog = await self.storage.recover_inbox(self.adapters.keys())
        if self._backlog:
            self._replayed.clear()
        return len(self._backlog)

    async def replay_inbox(self) -> int:
        """Once adapters are connected: give each message the previous process accepted but
        never answered to its lane, oldest first, exactly once; then release new messages."""
        backlog, self._backlog = self._backlog, []
        try:
            for row in backlog:
                inbound = row.message.inbound()
                if row.state == "received" or row.session_key is None:
                    await self._handle(inbound, row.id)  # stored, never routed: route it now
                    continue
                key = row.session_key
                route = Accept(key, scope_of(key), self.router.is_owner(inbound))
                pending = Pending(inbound, route, row.id, job_ref(row.message.update_id))
                if not await self._submit(pending, acknowledge=False):
                    await self.storage.discard_inbound(row.id)
        finally:
            self._replayed.set()
            if self.replicas is not None:  # sessions no live replica holds: taken over here
                self.replicas.start()
            if self.jobs is not None:  # due jobs fire once the backlog is handed on
                await self.jobs.resume()  # sends the last process left pending
                self.jobs.scheduler.adapters_ready()
        if backlog:
            log.info("inbox.replayed", extra={"messages": len(backlog)})
        return len(backlog)

    # --- runs -----------------------------------------------------------------------
    async def run_job(self, inbound: Inbound, session_key: str, inbox_id: int, job: JobRef) -> str | None:
        """A scheduled job is due: its stored inbox row goes to the session's lane like a
        message (rate limits and the token budget apply; a sub scope's budget even for the
        owner's jobs). None when queued, else why not (the row is dropped)."""
        if inbound.platform not in self.adapters:  # e.g. a Discord job while only Telegram runs
            await self.storage.discard_inbound(inbox_id)
            return "no-chat"
        route = Accept(session_key, scope_of(session_key), self.router.is_owner(inbound))
        if self.limiter is not None:
            if await self.limiter.check(inbound, session_key, is_owner=route.is_owner, scheduled=True) is not None:
                await self.storage.discard_inbound(inbox_id)
                return "rate-limited"
        await self.storage.ensure_session(session_key, route.scope.value, inbound.platform, inbound.chat_id)
        if self.replicas is not None and not await self.replicas.take(session_key, inbox_id):
            return None  # queued in the inbox for the replica holding the session's lane
        try:
            # A job falling due is nobody's new message: it never interrupts the user's answer.
            self.lanes.submit(session_key, Pending(inbound, route, inbox_id, job), interrupts=False)
        except LanesClosed:
            return None  # stays queued in the inbox: the next start runs it
        except LaneFull:
            await self.storage.discard_inbound(inbox_id)
            return "lane-full"
        return None

    async def _accept(self, inbound: Inbound, route: Accept, inbox_id: int) -> bool:
        """Queue an accepted message for its session's run; False if refused (the sender is
        told why)."""
        if inbound.attachments and self.media is not None:
            inbound, notices = self.media.oversized(inbound)
            for notice in notices:
                await self._notify(inbound, notice)
        if not inbound.text.strip() and not (inbound.attachments and self.media is not None):
            return False
        if len(inbound.text) > MAX_INBOUND_CHARS:
            await self._notify(
                inbound,
                f"That message is {len(inbound.text):,} characters; I take at most "
                f"{MAX_INBOUND_CHARS:,}. Please send it in parts or as a file.",
            )
            return False
        # One transaction (the session exists, the row is queued): on the first reply's path.
        if not await self.storage.accept_inbound(
            inbox_id, route.session_key, route.scope.value, inbound.platform, inbound.chat_id,
            routed=self.replicas is not None,
        ):  # fmt: skip
            log.info("inbox.routed_elsewhere", extra={"inbox": inbox_id})
            return False  # adopted by another replica meanwhile: its to answer
        return await self._submit(Pending(inbound, route, inbox_id), acknowledge=True)

    async def _submit(self, pending: Pending, *, acknowledge: bool) -> bool:
        """Hand a queued message to its lane. False if the lane refused it (the sender is
        told); a message that meets a shutdown stays queued for the next start."""
        inbound = pending.inbound
        key = pending.route.session_key
        # A run waiting on someone's ask_user answer is never stopped by another's message
        # (the addressee's own reply answered before this point).
        held = self.questions is not None and self.questions.waiting_in(key)
        if self.replicas is not None and not await self.replicas.take(key, pending.inbox_id):
            # Another replica runs this session (or already has this message): it answers
            # from the inbox, in order.
            mode = self.lanes.mode_of(key)
            if self.elsewhere is not None and mode == "interrupt" and pending.job is None and acknowledge:
                await self.elsewhere.interrupt(key)  # the holder stops its run, as here
            notice = queue_modes.BUSY_NOTICE[mode]
            if acknowledge and notice and not self.replicas.known(pending.inbox_id):
                await self._notify(inbound, notice)
            return True
        try:
            waiting = self.lanes.submit(key, pending, interrupts=pending.job is None and not held)
        except LanesClosed:
            await self._notify(inbound, KEPT_NOTICE)
            return True
        except LaneFull as exc:
            await self._notify(inbound, f"I'm still busy and {exc}; please wait for my answer, then send this again.")
            return False
        mode = self.lanes.mode_of(key)
        notice = queue_modes.BUSY_NOTICE["collect" if held and mode == "interrupt" else mode]
        if waiting == 1 and acknowledge and notice and inbound.album_id is None:
            # Best-effort: in a burst the answer itself is the acknowledgement, and a notice
            # taking its slot of the chat's pace would make every answer wait twice as long.
            await self._notify(inbound, notice, best_effort=True)
        return True

    async def _run_batch(self, key: str, items: list[Pending]) -> None:
        if len(items) > 1 and any(p.job is not None for p in items):
            # A job runs alone; what queued with it goes back to the lane, in order.
            first = items[0]
            now = [first] if first.job is not None else [p for p in items if p.job is None]
            # Back in front, in order (a submit would queue them behind newer messages).
            self.lanes.requeue(key, [p for p in items if p not in now])
            items = now
        if items[-1].job is None:
            items = [*self.deferred.pop(key, []), *await gather_album(self.lanes, key, items, self.album_settle_s)]
        claimed: tuple[str, str | None] | None = None
        if self.replicas is not None:  # each message once, even if two replicas hold the lane
            run_id = uuid.uuid4().hex
            items, claimed_model = await self.replicas.claim(items, run_id, key)
            if not items:
                return
            claimed = (run_id, claimed_model)
        last = items[-1]
        target = ReplyTarget.of(last.inbound)
        adapter = self.adapters[last.inbound.platform]
        if self.media is not None and any(p.inbound.attachments for p in items):
            # From here on each message's text includes its transcript and file notes (the
            # daily log and memory search see what was said, in this session). A voice note
            # that could not be transcribed waits: its row is not taken, so it stays queued
            # (a restart retries it too); the rest of the batch is answered now.
            items, waiting = await with_media(self.media, self.adapters, self._notify, key, last.route.scope, items)
            if waiting:
                self.deferred[key] = waiting
            if not items:
                return
            last = items[-1]
            target = ReplyTarget.of(last.inbound)
        content = await turn_content(self.storage, key, last.route.scope, items)
        if not content:  # e.g. only a voice note while speech-to-text is off (told already)
            await self.storage.finish_inbound(_inbox_ids(items))
            return
        request = RunRequest(
            session_key=key,
            scope=last.route.scope,
            content=content,
            messenger=AdapterMessenger(adapter, target),
            requester=last.inbound.identity,
            scheduled=last.job is not None,
        )
        # Taken before the run appends the user message: after a crash, a row whose run stored
        # that message counts as answered, any other goes back to the queue. The session's
        # /model (even one set while these waited) is read in the same transaction.
        if claimed is not None:
            request = dataclasses.replace(request, run_id=claimed[0])
            model = claimed[1]
        else:
            model = await self.storage.take_inbound_for_run(_inbox_ids(items), request.run_id, key)
        request = dataclasses.replace(request, model=model)
        if last.job is None:  # steer mode: later messages join this run at a tool boundary
            request = dataclasses.replace(request, steer=queue_modes.steer_hook(self, key, items, request.run_id))
        sink: Any = adapter.open_reply(target) if last.job is None or self.jobs is None else (
            await self.jobs.sink(last.job, lambda: adapter.open_reply(target))
        )
        self.run_starters[key] = frozenset(p.inbound.identity for p in items)
        outcome: RunFinished | RunFailed | None = None
        cancelled = False
        meter = self.metrics.meter()
        try:
            # aclosing: the run is closed here, never left to the garbage collector.
            async with contextlib.aclosing(self.agent.run(request)) as events:
                async for event in events:
                    meter.observe(event)
                    if isinstance(event, RunStarted) and last.job is None:
                        self.lanes.started(key)  # an interrupt may cancel it from now on (never a job)
                    await sink.handle(event)
                    if isinstance(event, (RunFinished, RunFailed)):
                        outcome = event
            if outcome is not None:
                # The user has the answer: a message now is next, not "waiting for the answer".
                self.lanes.answered(key)
            if isinstance(outcome, RunFinished) and outcome.text and self.speech is not None and spoke(items):
                self._spawn(send_voice_reply(self.speech, self.storage, key, adapter, target, outcome.text))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self.run_starters.pop(key, None)
            if self.workers is not None:  # a stopped or finished run takes its workers along
                await self._shielded(self.workers.cancel_run(request.run_id))
            await self._shielded(self._finish(sink, key, items, outcome, cancelled))
            self.metrics.finish_later(request.run_id, meter, owner_notifier(self.adapters, self.router))
            if last.job is not None and self.jobs is not None and not (cancelled and self._closing):
                await self._shielded(
                    self.jobs.finished(last.job, sink, request.run_id, outcome, cancelled, adapter, target)
                )

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Closing work that must not hold the lane (shutdown still waits for it)."""
        task = asyncio.ensure_future(work)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _shielded(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` to its end even if the caller is cancelled (a stopped run still closes
        its reply and stores its outcome); owned here, so shutdown waits for it before the
        database closes."""
        task = asyncio.ensure_future(work)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)
        return await asyncio.shield(task)

    async def _finish(
        self, sink: Any, key: str, items: list[Pending], outcome: RunFinished | RunFailed | None, cancelled: bool
    ) -> None:
        try:
            await sink.aclose(cancelled=cancelled)
        except Exception:
            log.exception("reply.close_failed", extra={"session": key})
        if not (cancelled and self._closing):
            # A shutdown leaves the rows running: the next start decides from the transcript
            # whether this run got as far as the user's message.
            try:
                await self.storage.finish_inbound(_inbox_ids(items))
            except Exception:
                log.exception("inbox.finish_failed", extra={"session": key})
        if self.replicas is not None:
            self.replicas.done(items)
        asked = " / ".join(p.inbound.text for p in items)
        if cancelled:
            did = "stopped by the user before finishing"
        elif isinstance(outcome, RunFinished):
            did = outcome.text or f"(no text; {outcome.stop_reason})"
        elif isinstance(outcome, RunFailed):
            did = f"failed: {outcome.message}"
        else:
            did = "ended without an answer"
        try:
            # On the loop: one small append (open, write, close; no fsync), like the reads the
            # context builder makes there; a hop to a thread per run cost several times more.
            append_run_entry(self.workspace, key, self._now(), items[-1].inbound.sender_name, asked, did)
        except OSError:
            log.exception("daily_log.write_failed", extra={"session": key})

    async def retry_deferred(self, key: str) -> bool:
        """/retry: the session's messages waiting after a failed transcription run again."""
        waiting = self.deferred.pop(key, [])
        if not waiting:
            return False
        self.lanes.requeue(key, waiting)
        return True

    async def _notify(self, inbound: Inbound, text: str, *, best_effort: bool = False) -> None:
        adapter = self.adapters.get(inbound.platform)
        if adapter is None:
            return
        try:
            if best_effort and isinstance(adapter, SendsNotices):
                await adapter.send_notice(ReplyTarget.of(inbound), text)
            else:
                await adapter.send_text(ReplyTarget.of(inbound), text)
        except Exception:
            log.exception("notice.failed", extra={"platform": inbound.platform})

    async def aclose(self) -> None:
        """Stop runs (their replies are closed as stopped) while adapters are still open.
        Queued messages stay in the inbox for the next start; each chat with some is told
        so once."""
        self._closing = True
        self._replayed.set()  # held messages meet the closed lanes and stay queued
        if self.replicas is not None:  # no new lanes taken; the held ones go with the connection
            await self.replicas.stop()
        if self.questions is not None:  # runs cut off now keep their questions for the restart
            self.questions.aclose()
        waiting: dict[tuple[str, str, str | None], Inbound] = {}
        for _, pending in await self.lanes.aclose():
            inbound = pending.inbound
            waiting[(inbound.platform, inbound.chat_id, inbound.thread_id)] = inbound
        for inbound in waiting.values():
            await self._notify(inbound, KEPT_NOTICE)
        while self._finishing:  # stopped runs' replies closed and outcomes stored, first
            await asyncio.gather(*list(self._finishing), return_exceptions=True)
        if self.replicas is not None:  # only now may another replica take these sessions
            await self.replicas.aclose()
        await self.metrics.settle()  # stored before the database closes


def _inbox_ids(items: list[Pending]) -> list[int]:
    return [p.inbox_id for p in items if p.inbox_id is not None]
