"""Where chat features plug in: commands and button actions register here, and
`bot.conversations.Conversations` dispatches through the registry without importing them.

`ChatHost` is what a feature may use of the conversations (a Protocol, so features import
this module, never `bot.conversations`): imports in bot/ flow one way, with no circle
(tests/test_architecture.py::test_bot_has_no_import_cycle). `bot.features` builds the
registry Roost runs with; `bot.app` hands it to Conversations."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from adapters.base import Adapter, ButtonAnswer

if TYPE_CHECKING:
    from agent_core.approvals import ApprovalGate
    from agent_core.breaker import Breakers
    from agent_core.inbound import Inbound
    from agent_core.llm import ModelListing
    from agent_core.loop import AgentLoop
    from agent_core.models import ModelTable
    from agent_core.plans import PlanBook
    from agent_core.questions import QuestionDesk
    from bot.commands import Command
    from bot.elsewhere import Elsewhere
    from bot.lanes import Lanes
    from bot.operations import Actor, Operations
    from bot.pending import Pending
    from bot.roles import AccessManager, IsAdmin
    from bot.router import Accept, Router
    from bot.run_metrics import Metrics
    from bot.scheduling.runs import JobRuns
    from bot.storage import Storage
    from workspace.context import LogCutoffs

log = logging.getLogger(__name__)

STALE = "This button is no longer active."


class ChatHost(Protocol):
    """What chat features see of `bot.conversations.Conversations`."""

    storage: Storage
    router: Router
    agent: AgentLoop
    adapters: dict[str, Adapter]
    workspace: Path
    models: list[str]
    catalogue: Callable[[], Awaitable[list[ModelListing]]] | None
    prices: ModelTable | None
    access: AccessManager | None
    is_group_admin: IsAdmin | None
    run_starters: dict[str, frozenset[str]]
    lanes: Lanes[Pending]
    metrics: Metrics
    jobs: JobRuns | None
    questions: QuestionDesk | None
    plans: PlanBook | None
    log_cutoffs: LogCutoffs | None
    breakers: Breakers | None
    gate: ApprovalGate
    operations: Operations
    registry: Registry
    elsewhere: Elsewhere | None

    async def receive(self, inbound: Inbound) -> bool: ...


CommandFn = Callable[["ChatHost", "Command", "Inbound", "Accept"], Awaitable[str]]
"""A chat command: its answer, as plain text for the adapter to send."""
PressFn = Callable[["ChatHost", str, str], Awaitable[ButtonAnswer]]
"""A button press: (host, action, presser's identity) → what the presser is told."""
SessionHook = Callable[["ChatHost", str, "Actor"], Awaitable[None]]
"""(host, session key, who sent /new)."""


@dataclass
class Registry:
    commands: dict[str, CommandFn] = field(default_factory=dict)
    buttons: dict[str, PressFn] = field(default_factory=dict)
    """Action prefix (e.g. "job:") → what a press on such a button does."""
    session_ended: list[SessionHook] = field(default_factory=list)
    """Awaited in order when /new ends a session's conversation."""

    def command(self, name: str, handler: CommandFn) -> None:
        if name in self.commands:
            raise ValueError(f"/{name} is registered twice")
        self.commands[name] = handler

    def button(self, prefix: str, handler: PressFn) -> None:
        if any(prefix.startswith(p) or p.startswith(prefix) for p in self.buttons):
            raise ValueError(f"button prefix {prefix!r} overlaps another")
        self.buttons[prefix] = handler

    def on_session_end(self, hook: SessionHook) -> None:
        self.session_ended.append(hook)

    async def press(self, host: ChatHost, action: str, identity: str) -> ButtonAnswer:
        for prefix, handler in self.buttons.items():
            if action.startswith(prefix):
                return await handler(host, action, identity)
        log.info("button.unknown", extra={"action": action[:64]})
        return ButtonAnswer(STALE, done=False)

    async def end_session(self, host: ChatHost, session_key: str, actor: Actor) -> None:
        for hook in self.session_ended:
            await hook(host, session_key, actor)
