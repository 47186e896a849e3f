"""The composition root: settings → storage → workspace → model client → tools → agent →
conversations → adapters, inside one AsyncExitStack so everything closes in reverse order."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any
from dataclasses import dataclass, field
from datetime import datetime

from adapters.base import Adapter
from adapters.console import IDENTITY as CONSOLE_IDENTITY
from agent_core.approvals import ApprovalGate
from agent_core.builtin_tools import default_tools
from agent_core.builtin_tools.schedule_tool import make_schedule_tool
from agent_core.builtin_tools.ask_user import make_ask_user_tool
from agent_core.builtin_tools.plan_tool import make_plan_tool
from agent_core.builtin_tools.spawn_tool import make_spawn_tool
from agent_core.compaction import CompactionConfig, Compactor
from agent_core.plans import PlanBook
from agent_core.questions import QuestionDesk
from agent_core.workers import WorkerLimits, WorkerPool
from agent_core.breaker import Breakers
from agent_core.failover import FailoverLLM
from agent_core.llm import LLMClient, LLMRequest, ModelListing, StreamItem
from agent_core.retry import RetryPolicy
from bot import breaker_report
from agent_core.loop import AgentLoop, LoopConfig, RunRequest
from agent_core.models import thinking_param
from agent_core import web_search
from agent_core.ports import ApprovalRecord
from agent_core.risk import Scope
from agent_core.tool_runner import CallCounts, ToolRunner
from agent_core.tools import ToolContext, ToolRegistry
from bot.channel_cursors import StoredCursors
from adapters.media import MB
from bot.media import MediaIntake
from bot.stt import transcriber
from bot.tts import speech
from bot.conversations import Conversations
from bot.features import chat_registry
from bot.live_config import LiveConfig, tool_call_cap
from bot.lean_imports import hidden
from bot.lane_claims import LaneClaims
from bot.leadership import Leadership
from bot.replicas import Replicas
from bot.elsewhere import Elsewhere
from bot.signals import Signals
from bot.exec_sandbox import exec_sandbox
from bot.logs import RedactSecrets
from bot.mcp_servers import McpManager
from bot.operations.core import ServiceState
from bot.platforms import group_admins
from bot.ratelimits import RateLimiter, RunBudget
from bot.roles import AccessManager
from bot.router import Router
from bot.scheduling.book import JobBook
from bot.scheduling.runs import JobRuns
from bot.scheduling.scheduler import Scheduler
from bot.scheduling.schedules import zone
from bot.settings import Settings, config_path
from bot.storage import Storage
from workspace.bootstrap import ensure_workspace
from workspace.context import LogCutoffs, build_context
from workspace.memory_index import MemoryIndex
from workspace.read_cache import ReadCache
from workspace.scoped_memory import ScopedMemory

log = logging.getLogger(__name__)

@dataclass
class Roost:
    settings: Settings
    storage: Storage
    conversations: Conversations
    agent: AgentLoop
    gate: ApprovalGate
    memory: MemoryIndex
    lazy_llm: LazyAnthropic | None = None
    expired_at_start: list[ApprovalRecord] = field(default_factory=list)
    """Approvals the previous process left pending; their cards are closed once adapters run."""
    live: LiveConfig | None = None
    """roost.toml's [policy] and [limits] as they are now (hot-reloaded)."""
    scheduler: Scheduler | None = None
    breakers: Breakers | None = None
    """The process's circuit breakers, one per model (shown by /status)."""
    mcp: McpManager | None = None
    """MCP servers' connections (their tools are in the agent's registry)."""

    def load_model_client(self) -> None:
        """Start loading the SDK in the background (call once adapters are connected)."""
        if self.lazy_llm is not None:
            self.lazy_llm.load()


class LazyAnthropic:
    """The anthropic SDK client, imported in a worker thread: the import alone takes ~2 s and
    holds the GIL, so it starts once the adapters are connected (`load`), or at the first
    run that needs it, whichever comes first.

    The thread is a daemon of its own, not the loop's default executor: `asyncio.run` joins
    the default executor before it returns, so a SIGTERM during the import kept `roost run`
    alive until the import finished (seconds on a loaded machine). Closed before it loaded,
    the half-imported SDK is simply abandoned with the process."""

    def __init__(self, **client_kwargs: Any) -> None:
        self._kwargs = client_kwargs
        self._client: asyncio.Future[LLMClient] | None = None

    def load(self) -> asyncio.Future[LLMClient]:
        if self._client is None:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[LLMClient] = loop.create_future()

            def settle(client: LLMClient | None, error: BaseException | None) -> None:
                if future.done():  # closed meanwhile
                    return
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(client)  # type: ignore[arg-type]

            def load() -> None:
                client: LLMClient | None = None
                error: BaseException | None = None
                try:
                    # Without its unused aiohttp transport (~8 MB for good, bot/lean_imports.py).
                    # Discord loads aiohttp before this, so no import elsewhere can hit the gap.
                    with hidden("aiohttp", unless_loaded=("anthropic",)):
                        from agent_core.anthropic_llm import AnthropicLLM

                    client = AnthropicLLM(**self._kwargs)
                except BaseException as exc:  # handed to whoever awaits the client
                    error = exc
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    loop.call_soon_threadsafe(settle, client, error)

            threading.Thread(target=load, name="load-anthropic", daemon=True).start()
            self._client = future
        return self._client

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        client = await asyncio.shield(self.load())
        async for item in client.stream(request):
            yield item

    async def count_tokens(self, request: LLMRequest) -> int:
        client = await asyncio.shield(self.load())
        return await client.count_tokens(request)  # type: ignore[attr-defined]

    async def list_models(self) -> list[ModelListing]:
        client = await asyncio.shield(self.load())
        return await client.list_models()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        if self._client is None:
            return
        if not self._client.done():  # still importing: nothing to close, and no run waits for it
            self._client.cancel()
            return
        if self._client.cancelled() or self._client.exception() is not None:
            # it never loaded; the runs that needed it already said why
            log.warning("llm.load_failed", exc_info=None if self._client.cancelled() else self._client.exception())
            return
        await self._client.result().aclose()  # type: ignore[attr-defined]


def service_states(mcp: McpManager, settings: Settings) -> list[ServiceState]:
    """The overview's MCP servers and speech engines (errors come redacted from the manager)."""
    out = [
        ServiceState(s.name, f"MCP server ({s.transport})", s.state,
                     f"{s.tools} tools" if s.state == "connected" else (s.error or ""))
        for s in mcp.states()
    ]  # fmt: skip
    stt = settings.stt.active
    stt_detail = {"openai": settings.stt.model, "local": "PocketSphinx, en-US, on this machine"}.get(stt, "")
    out.append(ServiceState("speech to text", "voice notes", stt, stt_detail))
    tts = "openai" if settings.tts.base_url else "off"
    out.append(ServiceState("text to speech", "/voice replies", tts, settings.tts.model if tts != "off" else ""))
    return out


@contextlib.asynccontextmanager
async def build(
    settings: Settings,
    adapters: Sequence[Adapter] = (),
    *,
    llm: LLMClient | None = None,
    recover: bool = True,
) -> AsyncIterator[Roost]:
    """Build the whole application; adapters are started by the caller (`bot.cli`).

    `recover` runs start-up recovery (runs cut off by a restart, approvals nobody can answer
    any more); only the serving process should do that, never a terminal beside it."""
    async with contextlib.AsyncExitStack() as stack:
        settings.home_dir.mkdir(parents=True, exist_ok=True)
        root = settings.workspace_dir
        ensure_workspace(root)
        storage = await Storage.open(settings.db_url)
        stack.push_async_callback(storage.aclose)
        storage.use_redactor(RedactSecrets(settings.secrets).redact)  # no secret in the audit trail
        # Replicas on PostgreSQL: what another replica runs is live, never "cut off by a
        # restart"; a dead replica's sessions are settled one by one when taken over.
        shared = storage.engine.dialect.name == "postgresql"
        if recover and not shared:
            for run in await storage.mark_interrupted_runs():
                log.info("run.interrupted_by_restart", extra={"run": run.id, "session": run.session_key})
        if recover:
            await storage.prune_seen_updates()
            await storage.prune_sends()
        if recover and not shared:
            for worker in await storage.interrupt_workers():  # reported, never silently lost
                log.info("worker.interrupted_by_restart", extra={"worker": worker.id, "run": worker.parent_run_id})

        memory = MemoryIndex(storage.engine, root)
        await memory.sync()

        lazy: LazyAnthropic | None = None
        if llm is None:
            api_key = settings.anthropic_api_key
            lazy = LazyAnthropic(
                api_key=api_key.get_secret_value() if api_key else None,
                base_url=settings.anthropic_base_url,
                max_retries=0,  # retries are FailoverLLM's: the SDK's cannot see the breakers
                stall_timeout_s=settings.agent.stall_timeout_s,
            )
            stack.push_async_callback(lazy.aclose)
            llm = lazy
        # One breaker per model for the whole process: every session and job shares them; and
        # replicas on PostgreSQL share them through the database.
        report = settings.home_dir / breaker_report.FILE_NAME
        breakers = Breakers(
            on_change=lambda b: breaker_report.write(report, b) if recover else None, store=storage if shared else None
        )
        # The configured model is a fallback too, for a session that chose another with /model.
        catalogue = getattr(llm, "list_models", None)  # what /model lists from the endpoint
        models = settings.agent.model_table()  # per-model windows, limits, prefill (agent_core.models)
        llm = FailoverLLM(
            llm, [settings.agent.model, *settings.agent.fallback_models],
            retry=RetryPolicy(max_retries=settings.agent.max_retries),
            breakers=breakers, slow_first_token_s=settings.agent.slow_first_token_s, facts=models,
        )  # fmt: skip

        registry = ToolRegistry(default_tools(
            exec_max_timeout_s=settings.agent.exec_max_timeout_s,
            exec_sandbox=exec_sandbox(settings),  # commands never see Roost's own files
        ))
        scheduler = Scheduler(
            storage, timezone=settings.tz_name, owners=settings.owners, workspace=root,
            heartbeat_settings=settings.heartbeat,
        )
        registry.register(make_schedule_tool(JobBook(scheduler)))
        # Structured execution: plans with evidence, questions back to the user, workers.
        plans = PlanBook(storage)
        questions = QuestionDesk(storage)
        registry.register(make_plan_tool(plans))
        registry.register(make_ask_user_tool(questions))
        gate = ApprovalGate(
            storage, approvers=[*settings.owners, *settings.approvers, CONSOLE_IDENTITY], ttl_s=settings.agent.approval_ttl_s,
            audit=storage,
        )
        expired_at_start = await gate.expire_orphans() if recover and not shared else []
        for record in expired_at_start:
            log.info("approval.expired_at_start", extra={"approval": record.id})
        # [policy] and [limits] of roost.toml, hot-reloaded; everything below reads them live.
        server_names = [web_search.NAME] if settings.agent.web_search else []
        live = LiveConfig(config_path(), policy=settings.policy, limits=settings.limits,
                          known_tools=[*registry.names(), *server_names], mcp=settings.mcp)  # fmt: skip
        # MCP servers connect in the background (start-up never waits); their tools join the
        # registry as they connect, offered and decided by the live policy.
        mcp = McpManager(registry, lambda: live.policy, stderr_dir=settings.home_dir / "logs" / "mcp")
        stack.push_async_callback(mcp.aclose)
        await mcp.apply(settings.mcp)
        live.on_mcp = mcp.apply
        await live.start()
        stack.push_async_callback(live.aclose)
        call_counts = CallCounts()  # a run's tool calls and its workers' count against one cap
        runner = ToolRunner(
            registry, gate, storage, audit=storage, default_timeout_s=settings.agent.tool_timeout_s,
            policy=lambda: live.policy, call_cap=lambda ctx: tool_call_cap(live.limits, ctx), counts=call_counts,
        )

        def worker_runner(tools: ToolRegistry) -> ToolRunner:
            # The same gate, policy and limits as the parent's runner: never more rights.
            return ToolRunner(
                tools, gate, storage, audit=storage, default_timeout_s=settings.agent.tool_timeout_s,
                policy=lambda: live.policy, call_cap=lambda ctx: tool_call_cap(live.limits, ctx), counts=call_counts,
            )

        loop_config = LoopConfig(
            model=settings.agent.model, max_turns=settings.agent.max_turns, max_tokens=settings.agent.max_tokens,
            thinking=thinking_param(settings.agent.thinking),
        )
        def worker_limits() -> WorkerLimits:
            w = live.limits.workers
            return WorkerLimits(max_children=w.per_run, max_running=w.running, max_turns=w.max_turns,
                                timeout_s=w.timeout_s)

        # Read on every message, so a hot-reloaded [limits] applies to the next one; a day is
        # ROOST_TIMEZONE's, midnight to midnight.
        limiter = RateLimiter(
            storage, storage, lambda: live.limits, tz=zone(settings.tz_name), windows=storage if shared else None
        )  # messages per minute: in the database when replicas share it
        # The spend cap between turns, for every run and worker (the router is built below).
        run_budget = RunBudget(limiter, storage, lambda identity: router.is_owner_identity(identity))
        workers = WorkerPool(
            llm=llm, tools=registry, runner=worker_runner, store=storage, config=loop_config, limits=worker_limits,
            between_turns=run_budget,
        )
        stack.push_async_callback(workers.aclose)
        runner.workers_running = workers.has_running  # while they run, a grant bound to files does not hold
        registry.register(make_spawn_tool(workers))

        log_cutoffs = LogCutoffs(root)  # today's log as of the conversation's start (cache hits)
        read_cache: ReadCache = ReadCache()  # unchanged workspace files: a few lstat calls, not a read

        def context(session_key: str, scope: Scope, now: datetime):  # noqa: ANN202
            roots = live.policy.roots_for(scope, session_key)
            cutoff = log_cutoffs.cutoff(session_key, now)
            return build_context(root, session_key, scope, now, roots, log_upto=cutoff, cache=read_cache)

        def tool_context(request: RunRequest) -> ToolContext:
            return ToolContext(
                session_key=request.session_key,
                scope=request.scope,
                workspace=root,
                run_id=request.run_id,
                memory=ScopedMemory(memory, root, request.session_key, request.scope),
                messenger=request.messenger,
                requester=request.requester,
                scheduled=request.scheduled,
                extra_roots=live.policy.roots_for(request.scope, request.session_key),
            )

        agent = AgentLoop(
            llm=llm,
            tools=registry,
            runner=runner,
            store=storage,
            context=context,
            tool_context=tool_context,
            config=loop_config,
            pinned=lambda request: plans.pinned(request.session_key),  # goal lock + current step
            models=models,
            server_tools=(lambda request: [web_search.TOOL] if web_search.offered(
                live.policy, request.scope, request.session_key) else []) if settings.agent.web_search else None,
            compactor=Compactor(llm, storage, CompactionConfig(
                context_window_tokens=settings.agent.context_window_tokens, compact_at=settings.agent.compact_at,
                keep_recent_tokens=settings.agent.compact_keep_tokens, timeout_s=settings.agent.compact_timeout_s,
            )),  # fmt: skip
            between_turns=run_budget,
        )
        router = Router(
            storage,
            owners=settings.owners,
            allowed_groups={
                "telegram": settings.telegram.allowed_groups,
                "discord": settings.discord.allowed_channels,
            },
            allowed_spaces={"discord": settings.discord.allowed_guilds},  # every channel of these guilds
        )
        config_groups = {"telegram": settings.telegram.allowed_groups, "discord": settings.discord.allowed_channels}
        conversations = Conversations(
            registry=chat_registry(),
            storage=storage,
            router=router,
            agent=agent,
            gate=gate,
            adapters={a.platform: a for a in adapters},
            is_group_admin=group_admins(adapters),  # the platform says who a group's admins are
            workspace=root,
            models=[settings.agent.model, *settings.agent.fallback_models],
            catalogue=catalogue,
            prices=models,
            queue_mode=settings.agent.queue_mode,
            max_concurrent_runs=settings.agent.max_concurrent_runs,
            limiter=limiter,
            access=AccessManager(
                storage, storage, owners=settings.owners, approvers=settings.approvers, config_groups=config_groups
            ),
        )
        # With replicas, the signal channel outlives the conversations: closing them (lanes
        # released) is the last thing told to the other replicas.
        signals = Signals(storage.engine.url) if recover and shared else None
        if signals is not None:
            stack.push_async_callback(signals.aclose)
        # Which replica runs a session; its identity lock is let go after the conversations
        # (and, in `roost run`, the adapters) closed: until then this replica may still store
        # messages, and must not look dead to the others.
        claims = LaneClaims(storage.engine) if recover and shared else None
        if claims is not None:
            stack.push_async_callback(claims.aclose)
        stack.push_async_callback(conversations.aclose)
        conversations.lanes.load_modes(await storage.queue_modes())  # each session's /queue choice
        conversations.breakers = breakers
        conversations.mcp_states = mcp.states
        # Jobs fire through the conversations' lanes; stopped before those close (LIFO).
        scheduler.attach(conversations)
        conversations.operations.live.scheduler, conversations.operations.live.breakers = scheduler, breakers
        conversations.operations.live.services = functools.partial(service_states, mcp, settings)
        conversations.jobs = JobRuns(storage, scheduler, adapters=lambda: conversations.adapters)
        conversations.questions, conversations.workers, conversations.plans = questions, workers, plans
        conversations.log_cutoffs = log_cutoffs
        conversations.channel_cursors = StoredCursors(storage, router, conversations.adapters)
        conversations.media = MediaIntake(
            root, int(settings.media.max_mb * MB), settings.media.max_images, transcriber(settings.stt)
        )
        conversations.speech = speech(settings.tts)
        questions.resume = conversations.resume_question
        if recover and shared:
            assert claims is not None
            conversations.replicas = Replicas(conversations, claims)
            # One Discord gateway session / one Telegram poller for all replicas (adapters.lead).
            conversations.leads = functools.partial(Leadership, storage.engine)
            # Presses, answers and /stop reach the replica where the run waits (LISTEN/NOTIFY).
            assert signals is not None
            elsewhere = Elsewhere(signals, storage, conversations.lanes, claims, gate, questions, conversations.adapters,
                                  conversations.run_starters)
            gate.relay = questions.relay = conversations.elsewhere = elsewhere
            elsewhere.take_over = conversations.replicas.take_over
            elsewhere.on_released, conversations.replicas.released = conversations.replicas.wake, elsewhere.released
            await signals.start()
        stack.push_async_callback(conversations.jobs.aclose)
        if recover:  # a terminal beside `roost run` never fires jobs
            await scheduler.start()
            stack.push_async_callback(scheduler.aclose)
        yield Roost(
            settings, storage, conversations, agent, gate, memory, lazy, expired_at_start, live, scheduler=scheduler,
            breakers=breakers, mcp=mcp,
        )
