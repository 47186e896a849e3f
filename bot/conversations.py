"""Where an accepted message becomes a run: de-duplication, routing, commands, lanes, and
the reply sink of the platform it came from. Implements `adapters.base.InboundHandler`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.base import Adapter, Delivery
from agent_core.approvals import ApprovalGate, Decision, ResolveResult
from agent_core.events import RunFailed, RunFinished
from agent_core.inbound import Inbound, ReplyTarget
from agent_core.loop import AgentLoop, RunRequest
from agent_core.ports import ApprovalRecord
from agent_core.risk import Scope
from bot.commands import parse_command
from bot.command_handlers import CommandHandlers
from bot.lanes import LaneFull, Lanes, LanesClosed
from bot.router import Accept, Buffered, Ignored, NeedsPairing, Router
from bot.storage import Storage
from workspace.daily_log import append_run_entry

log = logging.getLogger(__name__)

MAX_INBOUND_CHARS = 50_000


@dataclass(frozen=True, slots=True)
class Pending:
    inbound: Inbound
    route: Accept


class AdapterMessenger:
    """`send_message` for a run: delivers to the chat the run answers, confirmed or raising."""

    def __init__(self, adapter: Adapter, target: ReplyTarget) -> None:
        self._adapter = adapter
        self._target = ReplyTarget(target.platform, target.chat_id, target.thread_id)

    async def send(self, text: str) -> str:
        message_id = await self._adapter.send_text(self._target, text)
        return f"delivered as message {message_id}"


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
        queue_mode: str = "collect",
        max_concurrent_runs: int = 16,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.storage = storage
        self.router = router
        self.agent = agent
        self.gate = gate
        self.adapters = dict(adapters)
        self.workspace = workspace
        self.models = models
        self._now = now
        self.lanes: Lanes[Pending] = Lanes(
            self._run_batch, mode=queue_mode, max_concurrent=max_concurrent_runs  # type: ignore[arg-type]
        )
        self.commands = CommandHandlers(self)

    # --- InboundHandler -------------------------------------------------------------
    async def receive(self, inbound: Inbound) -> bool:
        if inbound.update_id is not None and not await self.storage.mark_update_seen(
            inbound.platform, inbound.update_id
        ):
            log.info("inbound.duplicate", extra={"platform": inbound.platform, "update": inbound.update_id})
            return False
        command = parse_command(inbound.text)
        if command and inbound.chat_kind == "group" and await self.commands.group_admin(command, inbound):
            return False
        route = await self.router.route(inbound)
        match route:
            case NeedsPairing(code=code):
                await self._notify(inbound, self.commands.pairing_text(code))
                if code is not None:
                    await self.commands.tell_owner_about_pairing(inbound, code)
            case Buffered() | Ignored():
                return False
            case Accept():
                if command is not None:
                    await self._notify(inbound, await self.commands.run(command, inbound, route))
                    return False
                return await self._accept(inbound, route)
        return False

    async def decide(self, approval_id: str, decision: Decision, identity: str) -> ResolveResult:
        return await self.gate.resolve(approval_id, decision, identity)

    async def approve_pairing(self, platform: str, code: str, identity: str) -> str:
        return await self.commands.approve_pairing(platform, code, identity)

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

    async def recover_deliveries(self) -> int:
        """At start-up: replies a previous process left mid-stream are marked as cut off in
        place, on the message that already shows them."""
        count = 0
        for row in await self.storage.unfinished_deliveries():
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
        return count

    # --- runs -----------------------------------------------------------------------
    async def _accept(self, inbound: Inbound, route: Accept) -> bool:
        if not inbound.text.strip():
            return False
        if len(inbound.text) > MAX_INBOUND_CHARS:
            await self._notify(
                inbound,
                f"That message is {len(inbound.text):,} characters; I take at most "
                f"{MAX_INBOUND_CHARS:,}. Please send it in parts or as a file.",
            )
            return False
        await self.storage.ensure_session(route.session_key, route.scope.value, inbound.platform, inbound.chat_id)
        try:
            waiting = self.lanes.submit(route.session_key, Pending(inbound, route))
        except LanesClosed as exc:
            await self._notify(inbound, f"{exc}; please send this again in a minute.")
            return False
        except LaneFull as exc:
            await self._notify(inbound, f"I'm still busy and {exc}; please wait for my answer.")
            return False
        if waiting == 1:
            await self._notify(inbound, "⏳ Got it — I'll get to this as soon as I finish the current answer.")
        return True

    async def _run_batch(self, key: str, items: list[Pending]) -> None:
        last = items[-1]
        target = ReplyTarget.of(last.inbound)
        adapter = self.adapters[last.inbound.platform]
        session = await self.storage.get_session(key)
        content = await self._content(key, last.route.scope, items)
        request = RunRequest(
            session_key=key,
            scope=last.route.scope,
            content=content,
            model=session.model_override if session else None,
            messenger=AdapterMessenger(adapter, target),
            requester=last.inbound.identity,
        )
        sink = adapter.open_reply(target)
        outcome: RunFinished | RunFailed | None = None
        cancelled = False
        try:
            # aclosing: the run is closed here, never left to the garbage collector.
            async with contextlib.aclosing(self.agent.run(request)) as events:
                async for event in events:
                    await sink.handle(event)
                    if isinstance(event, (RunFinished, RunFailed)):
                        outcome = event
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            await asyncio.shield(self._finish(sink, key, items, outcome, cancelled))

    async def _finish(
        self, sink: Any, key: str, items: list[Pending], outcome: RunFinished | RunFailed | None, cancelled: bool
    ) -> None:
        try:
            await sink.aclose(cancelled=cancelled)
        except Exception:
            log.exception("reply.close_failed", extra={"session": key})
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
            await asyncio.to_thread(
                append_run_entry, self.workspace, key, self._now(), items[-1].inbound.sender_name, asked, did
            )
        except OSError:
            log.exception("daily_log.write_failed", extra={"session": key})

    async def _content(self, key: str, scope: Scope, items: list[Pending]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if key.startswith("group:"):
            recent = await self.storage.recent_group_messages(key)
            if recent:
                lines = "\n".join(f"{m.sender}: {m.text}" for m in recent)
                blocks.append(
                    {
                        "type": "text",
                        "text": "Recent messages in this chat, not addressed to you "
                        f"(context only):\n{lines}",
                    }
                )
                await self.storage.clear_group_messages(key)
        for item in items:
            text = item.inbound.text
            if scope is Scope.SUB:
                text = f"[{item.inbound.sender_name}] {text}"
            blocks.append({"type": "text", "text": text})
        return blocks

    async def _notify(self, inbound: Inbound, text: str) -> None:
        adapter = self.adapters.get(inbound.platform)
        if adapter is None:
            return
        try:
            await adapter.send_text(ReplyTarget.of(inbound), text)
        except Exception:
            log.exception("notice.failed", extra={"platform": inbound.platform})

    async def aclose(self) -> None:
        """Stop runs (their replies are closed as stopped) while adapters are still open, and
        tell whoever is still waiting in a queue."""
        for _, pending in await self.lanes.aclose():
            await self._notify(
                pending.inbound, "⚠️ I'm restarting and didn't get to this message; please send it again."
            )
