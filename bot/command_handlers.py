"""What each chat command does. Answers are plain text for the adapter to send."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from adapters.base import Button
from agent_core.inbound import Inbound, ReplyTarget
from agent_core.llm import LLMError
from agent_core.ports import AuditEntry, AuditKind
from agent_core.risk import Scope
from agent_core.compaction import describe as describe_compaction
from agent_core.transcript import repair
from bot.commands import HELP, Command, estimate_cost
from bot.operations import AuditQuery, Live, Operations, chat_actor
from bot.operations.core import SessionPlace
from bot.operations.grants import CHAT_LISTING, listing
from bot.roles import AccessManager, GroupCommandPolicy, parse_target
from bot.router import Accept

if TYPE_CHECKING:
    from bot.registry import ChatHost

log = logging.getLogger(__name__)


class CommandHandlers:
    def __init__(self, conversations: ChatHost) -> None:
        self._c = conversations
        c = conversations
        self.access = c.access or AccessManager(c.storage, c.storage, owners=c.router.owners)
        self.group_policy = GroupCommandPolicy(c.router.is_owner_identity, c.is_group_admin)
        self.operations = Operations(c.storage, owners=c.router.owners, access=self.access,
                                     live=Live(gate=c.gate, lanes=c.lanes))  # fmt: skip
        """The verbs chat shares with the CLI and the dashboard (bot.operations); bot.app adds
        the scheduler and breakers to its `live` once they exist."""

    async def run(self, command: Command, inbound: Inbound, route: Accept) -> str:
        handler = getattr(self, f"_cmd_{command.name}", None)
        plugged = self._c.registry.commands.get(command.name)  # a feature's command (bot.registry)
        if handler is None and plugged is None:
            return f"Unknown command /{command.name}. Send /help to see what I understand."
        if inbound.chat_kind == "group":
            starters = self._c.run_starters.get(route.session_key, frozenset())
            refusal = await self.group_policy.refusal(command, inbound, starters)
            if refusal is not None and command.name == "stop" and self._c.elsewhere is not None:
                # The run may be another replica's: whoever asked for it may stop it from here.
                starters = await self._c.elsewhere.starters(route.session_key)
                refusal = await self.group_policy.refusal(command, inbound, starters) if starters else refusal
            if refusal is not None:
                await self.audit_access(inbound, f"/{command.name}", "denied", route.session_key, kind="command")
                return refusal
        if handler is None:
            return await plugged(self._c, command, inbound, route)  # type: ignore[misc]
        return await handler(command, inbound, route)

    async def audit_access(
        self, inbound: Inbound, subject: str, decision: str, session_key: str | None = None,
        *, kind: AuditKind = "access", detail: str = "",
    ) -> None:
        """An access decision about this message's sender, for the audit trail."""
        where = f"{inbound.platform} {inbound.chat_kind} {inbound.chat_id}"
        await self.operations.record(
            AuditEntry(
                kind=kind,
                actor=inbound.identity,
                session_key=session_key,
                subject=subject,
                detail=f"{where}; {detail}" if detail else where,
                decision=decision,
            )
        )

    async def audit_stranger(self, inbound: Inbound, code: str | None) -> None:
        """A stranger wrote privately: denied, with a pairing code (or none, too many wait)."""
        decision = "pairing requested" if code is not None else "denied"
        detail = "" if code is not None else "too many pairing requests pending"
        await self.audit_access(inbound, "private chat", decision, kind="pairing", detail=detail)

    def _owner_in_private(self, command: Command, inbound: Inbound, route: Accept) -> str | None:
        if not route.is_owner:
            return f"Only my owner can use /{command.name}."
        if inbound.chat_kind != "private":
            return f"Use /{command.name} in our private chat."
        return None

    async def _cmd_allow(self, command: Command, inbound: Inbound, route: Accept) -> str:
        """In a private chat (in groups, /allow is `group_admin`): pair a user or allow a group."""
        return await self._change_access(command, inbound, route, self.operations.allow)

    async def _cmd_revoke(self, command: Command, inbound: Inbound, route: Accept) -> str:
        return await self._change_access(command, inbound, route, self.operations.revoke_access)

    async def _change_access(
        self, command: Command, inbound: Inbound, route: Accept, change: Callable[[Any, Any], Awaitable[str]]
    ) -> str:
        refusal = self._owner_in_private(command, inbound, route)
        if refusal is not None:
            return refusal
        try:
            target = parse_target(command.args)
        except ValueError as exc:
            return f"{exc}. Example: /{command.name} telegram:42 or /{command.name} group telegram:-1001234."
        return await change(chat_actor(inbound.identity, is_owner=route.is_owner), target)

    async def _cmd_audit(self, command: Command, inbound: Inbound, route: Accept) -> str:
        refusal = self._owner_in_private(command, inbound, route)
        if refusal is not None:
            return refusal
        rows = await self.operations.audit(chat_actor(inbound.identity, is_owner=route.is_owner), AuditQuery(limit=20))
        if not rows:
            return "The audit trail is empty."
        return "Last audit entries (UTC), oldest first:\n" + "\n".join(r.line() for r in rows)

    async def _cmd_grants(self, command: Command, inbound: Inbound, route: Accept) -> str:
        """'Always allow' rules: listed with ids, revoked by id (owner, private chat). `/grants`
        lists every session's rules; `/grants revoke ID` removes one."""
        refusal = self._owner_in_private(command, inbound, route)
        if refusal is not None:
            return refusal
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        action, _, rest = command.args.strip().partition(" ")
        if not action or action == "list":
            return listing(await self.operations.grants(actor), "Revoke one with /grants revoke <id>.", CHAT_LISTING)
        if action == "revoke" and rest.strip():
            return await self.operations.revoke_grant(actor, rest)
        return "Use /grants to list the 'always allow' rules, /grants revoke <id> to remove one."

    async def _cmd_usage(self, command: Command, inbound: Inbound, route: Accept) -> str:
        """The owner in a private chat sees every session; anyone else this session only."""
        everything = route.is_owner and inbound.chat_kind == "private"
        now = self._c.metrics.now().astimezone()
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        return await self.operations.usage_text(actor, now, session_key=None if everything else route.session_key)

    async def _cmd_start(self, command: Command, inbound: Inbound, route: Accept) -> str:
        who = "This is your private main session." if route.is_owner else "This is an isolated session."
        return f"Hi {inbound.sender_name}! {who}\n\n{HELP}"

    async def _cmd_help(self, command: Command, inbound: Inbound, route: Accept) -> str:
        return HELP

    async def _cmd_new(self, command: Command, inbound: Inbound, route: Accept) -> str:
        if await self._busy(route.session_key):
            return "I'm in the middle of an answer; /stop it first, then /new."
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        await self.operations.new_epoch(actor, _place(inbound, route))
        await self._c.registry.end_session(self._c, route.session_key, actor)  # goal lock, plan, question
        # "Always allow" was given for the conversation that just ended, not forever.
        cleared = await self.operations.clear_session_grants(actor, route.session_key)
        note = f" {cleared} 'always allow' permission(s) were reset." if cleared else ""
        return f"Started a fresh session: I won't see the earlier messages of this chat.{note}"

    async def _busy(self, session_key: str) -> bool:
        """A run of the session is going here, or on another replica (which holds its lane)."""
        if self._c.lanes.is_busy(session_key):
            return True
        return self._c.elsewhere is not None and await self._c.elsewhere.lane_held_elsewhere(session_key)

    async def _cmd_stop(self, command: Command, inbound: Inbound, route: Accept) -> str:
        if self._c.lanes.stop(route.session_key):
            return "Stopped."
        if self._c.elsewhere is not None and await self._c.elsewhere.stop(route.session_key):
            return "Stopped."  # the run was on another replica
        return "Nothing is running."

    async def _cmd_status(self, command: Command, inbound: Inbound, route: Accept) -> str:
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        status = await self.operations.session_status(actor, route.session_key)
        model = status.model_override or self._c.models[0]
        totals = status.totals
        usage = totals.usage
        transcript = repair(status.transcript)
        context_tokens = sum(len(str(m["content"])) for m in transcript) // 4
        cost = estimate_cost(
            model, usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens, self._c.prices,
        )
        lines = [
            f"Model: {model}",
            f"Session: {route.session_key} ({'main' if route.scope is Scope.MAIN else 'isolated'})",
            f"Runs: {totals.runs}, turns: {totals.turns}",
            f"Tokens: {usage.input_tokens:,} in, {usage.output_tokens:,} out, "
            f"{usage.cache_read_input_tokens:,} read from cache, {usage.cache_creation_input_tokens:,} written to cache",
            f"Cost: ≈ ${cost:.4f}" if cost is not None else "Cost: unknown (no prices with a source configured for this model)",
            f"Context: {len(transcript)} messages, ≈ {context_tokens:,} tokens",
            *describe_compaction(*status.compaction, status.transcript),
            "Busy: yes" if await self._busy(route.session_key) else "Busy: no",
            f"'Always allow' rules: {status.grants}",
        ]
        queued = self._c.lanes.queued(route.session_key)
        if queued:
            lines.append(f"Queued messages: {queued}")
        if self._c.breakers is not None:
            await self._c.breakers.refresh()  # what every replica found, not only this one
            # Every configured model, even one never called yet (shown as ok).
            states = {s.model: s for s in self._c.breakers.statuses()}
            shown = [states[m].describe() if m in states else f"{m}: ok" for m in self._c.models]
            lines.append("Models: " + "; ".join(shown))
        servers = self._c.mcp_states() if self._c.mcp_states is not None and route.scope is Scope.MAIN else []
        if servers:  # the owner's servers: never listed in a group
            lines.append("MCP: " + "; ".join(f"{s.name} {s.state} ({s.tools} tools)" for s in servers))
        return "\n".join(lines)

    async def _cmd_voice(self, command: Command, inbound: Inbound, route: Accept) -> str:
        """`/voice on|off`: answers to voice notes also come back as voice notes."""
        arg = command.args.strip().lower()
        key = route.session_key
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        if arg not in ("on", "off"):
            state = "on" if await self.operations.voice_replies(actor, key) else "off"
            return f"Voice replies here: {state}. /voice on — I answer voice notes with a voice note too; /voice off — text only."
        if arg == "on" and self._c.speech is None:
            return "Voice replies need a text-to-speech service: set ROOST_TTS__BASE_URL (any OpenAI-compatible /v1/audio/speech)."
        await self.operations.set_voice_replies(actor, _place(inbound, route), arg == "on")
        return ("Voice replies on: I'll answer your voice notes with a voice note as well as text."
                if arg == "on" else "Voice replies off: text only.")

    async def _cmd_retry(self, command: Command, inbound: Inbound, route: Accept) -> str:
        if await self._c.retry_deferred(route.session_key):
            return "Trying your voice note again…"
        return "Nothing is waiting to be retried here."

    async def _cmd_compact(self, command: Command, inbound: Inbound, route: Accept) -> str:
        """Compaction runs inside the session's next run (never beside a running one)."""
        compactor = self._c.agent.compactor
        if compactor is None:
            return "Compaction is not enabled."
        compactor.force(route.session_key)
        return (
            "I'll compact this conversation before my next answer: older messages become a "
            "structured summary (they stay stored). /status shows the size before and after."
        )

    async def _cmd_model(self, command: Command, inbound: Inbound, route: Accept) -> str:
        models = self._c.models
        actor = chat_actor(inbound.identity, is_owner=route.is_owner)
        current = await self.operations.session_model(actor, route.session_key) or models[0]
        if not command.args:
            listing = "\n".join(f"{'• ' if m == current else '  '}{m}" for m in models)
            offered = await self._offered_models()
            return f"Current model: {current}\nConfigured models:\n{listing}\n{offered}Switch with /model <name>."
        wanted = command.args.strip()
        if wanted not in models:
            return f"{wanted!r} is not configured. Choose one of: {', '.join(models)}."
        await self.operations.set_session_model(actor, _place(inbound, route), None if wanted == models[0] else wanted)
        return f"Model for this session: {wanted}."

    async def _offered_models(self) -> str:
        """What the model endpoint offers (GET /v1/models), one line; a failure is said, not raised."""
        if self._c.catalogue is None:
            return ""
        try:
            async with asyncio.timeout(10):
                offered = await self._c.catalogue()
        except TimeoutError:
            return "The model endpoint did not list its models in time.\n"
        except LLMError as exc:
            return f"Could not list the endpoint's models: {exc}\n"
        if not offered:
            return "The model endpoint lists no models.\n"
        shown = ", ".join(m.id for m in offered[:30])
        more = f" (+{len(offered) - 30} more)" if len(offered) > 30 else ""
        ids = {m.id for m in offered}
        missing = [m for m in self._c.models if m not in ids]
        warning = f"Configured but not offered by the endpoint: {', '.join(missing)}\n" if missing else ""
        return f"The endpoint offers: {shown}{more}\n{warning}"

    async def _cmd_pair(self, command: Command, inbound: Inbound, route: Accept) -> str:
        platform, _, code = command.args.partition(" ")
        if not code:
            platform, code = inbound.platform, platform
        return await self.approve_pairing(platform, code, inbound.identity)

    async def approve_pairing(self, platform: str, code: str, identity: str) -> str:
        if not self._c.router.is_owner_identity(identity):
            return "Only the owner can approve pairing codes."
        code = code.strip().upper()
        paired = await self.operations.approve_pairing(chat_actor(identity, is_owner=True), platform, code)
        if paired is None:
            return f"No pending pairing code {code!r} on {platform} (wrong, expired or already used)."
        await self._notify_user(platform, paired.user_id, "You're paired — send me a message any time.")
        return f"Paired {paired.user_name or paired.user_id} on {platform}."

    async def group_admin(self, command: Command, inbound: Inbound) -> bool:
        """/allow and /disallow work in groups not yet allowed; only the owner may use them."""
        if command.name not in ("allow", "disallow") or not inbound.mentioned:
            return False  # /allow@another_bot is not for us
        target = ReplyTarget.of(inbound)
        adapter = self._c.adapters.get(inbound.platform)
        group = f"group {inbound.platform}:{inbound.chat_id}"
        if not self._c.router.is_owner(inbound):
            reply = "Only my owner can change where I answer."
            await self.audit_access(inbound, f"/{command.name} {group}", "denied", kind="command")
        elif command.name == "allow":
            await self.operations.allow_group_here(chat_actor(inbound.identity, is_owner=True), inbound.platform, inbound.chat_id)
            reply = "I'll answer in this group when mentioned."
            await self.audit_access(inbound, group, "allowed")
        elif self._c.router.statically_allowed(inbound):
            reply = (
                "This group is allowed by the configuration (ROOST_TELEGRAM__ALLOWED_GROUPS); "
                "remove it there to stop me answering."
            )
        else:
            await self.operations.disallow_group_here(chat_actor(inbound.identity, is_owner=True), inbound.platform, inbound.chat_id)
            reply = "I won't answer in this group any more."
            await self.audit_access(inbound, group, "revoked")
        if adapter is not None:
            await adapter.send_text(target, reply)
        return True

    def pairing_text(self, code: str | None) -> str:
        if code is None:
            return "Too many people are waiting for pairing right now; please try again later."
        return (
            f"Hi! I only talk to people my owner has approved. Your pairing code is {code} "
            "(valid for 1 hour). Send it to my owner; once they approve it, write again."
        )

    async def tell_owner_about_pairing(self, inbound: Inbound, code: str) -> None:
        text = (
            f"{inbound.sender_name} ({inbound.platform} user {inbound.sender_id}) asks to talk to me. "
            f"Approve with the button, /pair {code} here, or `roost pairing approve {inbound.platform} {code}`."
        )
        buttons = [Button("Approve pairing", f"pair:{code}")]
        for owner in self._c.router.owners_on(inbound.platform):
            await self._notify_user(inbound.platform, owner, text, buttons)

    async def _notify_user(self, platform: str, user_id: str, text: str, buttons: list[Button] | None = None) -> None:
        adapter = self._c.adapters.get(platform)
        if adapter is None:
            return
        try:
            await adapter.send_text(ReplyTarget(platform, user_id), text, buttons=buttons or ())
        except Exception:  # the owner may never have opened a chat with the bot
            log.warning("notify.failed", extra={"platform": platform}, exc_info=True)


def _place(inbound: Inbound, route: Accept) -> SessionPlace:
    return SessionPlace(route.session_key, route.scope.value, inbound.platform, inbound.chat_id)
