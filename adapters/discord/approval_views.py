"""Approval cards as discord.ui buttons that survive restarts.

Contract:
- A card shows the tool, the FULL action in a code block (an action longer than
  `INLINE_ACTION_CHARS` goes as the attached file `action.txt`, never truncated) and the
  buttons Approve once / Always in this session / Deny. Each button's custom_id is
  `ap:<approval_id>:<o|a|d>` (the shared approval payload, far below Discord's 100): only
  the approval id, never the action.
- The buttons are a `DynamicItem` registered with the client at start, so ANY card's
  buttons resolve, also one sent by an earlier process: the state comes from the database
  through `InboundHandler.decide`, nothing is held in memory (a persistent view keyed by
  the approval id).
- Every press is acknowledged first (a deferred update, well within Discord's 3 s), then
  decided; a non-approver gets an ephemeral "not yours" and nothing changes; a decided
  card is edited to show the outcome with its buttons removed.
- `DiscordCards` delivers the cards of running replies through the shared `Outbox`: a card
  is synced to its newest desired state, so a resolution arriving before the card was sent
  yields one message already showing the outcome.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import discord

from adapters.errors import DeliveryError, MessageGone, RateLimited
from adapters.outbox import Outbox, Priority
from adapters.telegram.approval_cards import outcome_text
from adapters.telegram.callback_data import ApprovalPress, CallbackCodec, parse_approval
from agent_core.approvals import Decision, ResolveOutcome
from agent_core.events import ApprovalRequested, ApprovalResolved
from agent_core.ports import ApprovalRecord

if TYPE_CHECKING:
    from adapters.discord.transport import DiscordTransport

log = logging.getLogger(__name__)

INLINE_ACTION_CHARS = 1500
"""Longer actions go as a file: the card must stay well below Discord's 2000."""
DOCUMENT_NAME = "action.txt"
MAX_ATTEMPTS = 3
NOT_YOURS = "This approval isn't yours."
NO_MENTIONS = discord.AllowedMentions.none()
_CODEC = CallbackCodec()
_LABELS = {
    Decision.ONCE: ("✅ Approve once", discord.ButtonStyle.success),
    Decision.ALWAYS: ("♾ Always in this session", discord.ButtonStyle.primary),
    Decision.DENY: ("❌ Deny", discord.ButtonStyle.danger),
}

CardState = Literal["live", "done", "failed"]
PressHandler = Callable[[discord.Interaction, ApprovalPress], Awaitable[None]]


def card_ref(channel_id: int | str, message_id: str) -> str:
    """Where a card is: "discord:<channel>:<message>"."""
    return f"discord:{channel_id}:{message_id}"


def parse_card_ref(ref: str) -> tuple[int, int] | None:
    parts = ref.split(":")
    if len(parts) != 3 or parts[0] != "discord" or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


def needs_file(action: str) -> bool:
    return len(action) > INLINE_ACTION_CHARS


def _fenced(text: str) -> str:
    """A code block that no backtick run inside `text` can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def card_text(tool_name: str, action: str, expires_at: datetime, *, decision: str | None, who: str | None) -> str:
    """What a card shows (Discord Markdown)."""
    pending = decision is None
    header = f"🔐 **{tool_name}** {'wants' if pending else 'wanted'} to run:"
    if needs_file(action):
        body = (f"The full action ({len(action):,} characters) is in the attached file "
                f"{DOCUMENT_NAME} — read it before deciding.")
    else:
        body = _fenced(action if action.strip() else "(no details)")
    if pending:
        footer = f"⏳ Waiting for your decision (expires {expires_at:%H:%M} UTC)."
    else:
        footer = f"**{outcome_text(decision, who)}.**"
    return f"{header}\n{body}\n{footer}"


def record_text(record: ApprovalRecord, who: str | None) -> str:
    decision = None if record.state == "pending" else record.state
    return card_text(record.tool_name, record.action, record.expires_at, decision=decision, who=who)


class ApprovalButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"ap:(?P<id>[^:]+):(?P<code>[oad])"):
    """One approval button; rebuilt by discord.py from any matching custom_id."""

    def __init__(self, approval_id: str, decision: Decision) -> None:
        label, style = _LABELS[decision]
        super().__init__(discord.ui.Button(label=label, style=style, custom_id=_CODEC.approval(approval_id, decision)))
        self.press = ApprovalPress(approval_id, decision)

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: re.Match[str]
    ) -> ApprovalButton:
        press = parse_approval(item.custom_id or "")
        if press is None:  # the template matched, so this cannot happen
            raise ValueError(f"not an approval button: {item.custom_id!r}")
        return cls(press.approval_id, press.decision)

    async def callback(self, interaction: discord.Interaction) -> None:  # type: ignore[override]
        on_press: PressHandler | None = getattr(interaction.client, "on_approval_press", None)
        if on_press is None:
            log.warning("discord.approval_press_unhandled approval=%s", self.press.approval_id)
            return
        await on_press(interaction, self.press)


class ActionButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    # pair, ask, resume, and a scheduled job's Run now / Pause / Cancel (job:<op>:<id>)
    template=r"pair:(?P<code>[A-Za-z0-9]{1,32})|ask:[0-9a-f]{1,32}:[0-9]{1,2}|resume:[0-9a-f]{1,32}"
    r"|job:[a-z_]{1,16}:[A-Za-z0-9_-]{1,64}",
):
    """A button on a standalone message (`adapters.base.Button`), e.g. "pair:<code>"; like
    approval buttons it works after a restart (the action is the whole custom_id)."""

    def __init__(self, label: str, action: str) -> None:
        super().__init__(discord.ui.Button(label=label[:80], style=discord.ButtonStyle.primary, custom_id=action))
        self.action = action

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: re.Match[str]
    ) -> ActionButton:
        return cls(item.label or "", item.custom_id or "")

    async def callback(self, interaction: discord.Interaction) -> None:  # type: ignore[override]
        on_action: Callable[[discord.Interaction, str], Awaitable[None]] | None = getattr(
            interaction.client, "on_action_press", None
        )
        if on_action is not None:
            await on_action(interaction, self.action)


def approval_view(approval_id: str) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for decision in (Decision.ONCE, Decision.ALWAYS, Decision.DENY):
        view.add_item(ApprovalButton(approval_id, decision))
    return view


@dataclass(slots=True)
class Card:
    request: ApprovalRequested
    transport: DiscordTransport
    decision: str | None = None
    resolved_by: str | None = None
    message_id: str | None = None
    shown: str | None = None
    state: CardState = "live"
    failures: int = 0
    key: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = ("card", self.request.approval_id)


class DiscordCards:
    """Every live approval card of one adapter (see the module docstring)."""

    def __init__(self, outbox: Outbox, on_card: Callable[[str, str], Awaitable[None]] | None = None) -> None:
        self._outbox = outbox
        self._on_card = on_card
        self._cards: dict[str, Card] = {}
        self._progress = asyncio.Event()
        self.names: dict[str, str] = {}

    def is_live(self, approval_id: str) -> bool:
        return approval_id in self._cards

    def who(self, identity: str | None) -> str | None:
        return None if identity is None else self.names.get(identity, identity)

    def show(self, transport: DiscordTransport, event: ApprovalRequested) -> None:
        card = Card(event, transport)
        self._cards[event.approval_id] = card
        self._submit(card)

    def resolve(self, event: ApprovalResolved, *, only_pending: bool = False) -> None:
        card = self._cards.get(event.approval_id)
        if card is None or (only_pending and card.decision is not None):
            return
        card.decision, card.resolved_by = event.decision, event.resolved_by
        if card.state == "live":
            self._submit(card)

    async def settle(self, approval_ids: Iterable[str]) -> None:
        """Wait until these cards show their final state (or failed), then forget them."""
        ids = list(approval_ids)
        while any(self._pending(i) for i in ids):
            self._progress.clear()
            await self._progress.wait()
        for approval_id in ids:
            card = self._cards.get(approval_id)
            if card is not None and card.state != "live":
                del self._cards[approval_id]

    def _pending(self, approval_id: str) -> bool:
        card = self._cards.get(approval_id)
        if card is None or card.state != "live":
            return False
        if self._outbox.closed:
            card.state = "failed"
            return False
        return True

    def _desired(self, card: Card) -> str:
        req = card.request
        return card_text(req.tool_name, req.action, req.expires_at, decision=card.decision, who=self.who(card.resolved_by))

    def _submit(self, card: Card) -> None:
        if self._outbox.closed:
            card.state = "failed"
            self._progress.set()
            return

        def dropped() -> None:
            card.state = "failed" if card.state == "live" else card.state
            self._progress.set()

        t = card.transport
        self._outbox.submit(
            t.chat_key, card.key, lambda: self._sync(card),
            priority=Priority.SEND if card.message_id is None else Priority.EDIT,
            interval=t.min_edit_interval_s, on_drop=dropped,
        )

    async def _sync(self, card: Card) -> bool:
        if card.state != "live":
            return False
        desired = self._desired(card)
        pending = card.decision is None
        made_request = True
        try:
            if card.message_id is None:
                card.message_id = await self._send(card, desired, pending)
                await self._note(card)
            elif desired != card.shown:
                await card.transport.edit(card.message_id, desired, [], remove_view=not pending)
            else:
                made_request = False
            card.shown = desired
        except RateLimited:
            raise  # the outbox pauses, then syncs again with the newest state
        except MessageGone:
            card.state = "done"  # deleted by a user; a press on another copy still works
        except DeliveryError as exc:
            card.failures += 1
            log.warning("discord.card_failed approval=%s attempt=%d: %s", card.request.approval_id, card.failures, exc)
            if card.failures >= MAX_ATTEMPTS:
                card.state = "failed"
        if card.state == "live":
            if card.shown == self._desired(card):
                if card.decision is not None:
                    card.state = "done"
            else:
                self._submit(card)
        self._progress.set()
        return made_request

    async def _send(self, card: Card, text: str, pending: bool) -> str:
        req = card.request
        view = approval_view(req.approval_id) if pending else None
        if needs_file(req.action):
            return await card.transport.send_file(req.action.encode(), DOCUMENT_NAME, text, view=view)
        return await card.transport.send(text, [], view=view)

    async def _note(self, card: Card) -> None:
        if self._on_card is None or card.message_id is None:
            return
        try:
            await self._on_card(card.request.approval_id, card_ref(card.transport.channel.id, card.message_id))
        except Exception:  # the card works without the note; only restart clean-up needs it
            log.warning("discord.card_note_failed approval=%s", card.request.approval_id, exc_info=True)


class ApprovalPresses:
    """Handles a press of any approval button (see the module docstring)."""

    def __init__(self, cards: DiscordCards, decide: Callable[[str, Decision, str], Awaitable[Any]]) -> None:
        self._cards = cards
        self._decide = decide

    async def __call__(self, interaction: discord.Interaction, press: ApprovalPress) -> None:
        try:
            await interaction.response.defer()  # within 3 s, before anything slow
        except discord.HTTPException as exc:  # too late (10062) or answered twice (40060)
            log.warning("discord.press_ack_failed approval=%s: %s", press.approval_id, exc)
            return
        identity = f"discord:{interaction.user.id}"
        self._cards.names[identity] = interaction.user.display_name
        try:
            await self._decided(interaction, press, identity)
        except Exception:  # task boundary: the presser still hears something
            log.exception("discord.press_failed approval=%s", press.approval_id)
            await _tell(interaction, "Something went wrong; please try again.")

    async def _decided(self, interaction: discord.Interaction, press: ApprovalPress, identity: str) -> None:
        result = await self._decide(press.approval_id, press.decision, identity)
        record, live = result.record, self._cards.is_live(press.approval_id)
        match result.outcome:
            case ResolveOutcome.RESOLVED:
                if record is not None and not live:  # no run renders this card any more
                    await _show(interaction, record_text(record, self._cards.who(record.resolved_by)))
            case ResolveOutcome.NOT_YOURS:
                await _tell(interaction, NOT_YOURS)
            case ResolveOutcome.ALREADY_DECIDED:
                if record is None:
                    await _tell(interaction, "This approval was already decided.")
                    return
                if not live:
                    await _show(interaction, record_text(record, self._cards.who(record.resolved_by)))
                if record.state == "expired":
                    await _tell(interaction, "This approval expired — nothing was run.")
                else:
                    await _tell(interaction, f"Already decided: {outcome_text(record.state, self._cards.who(record.resolved_by))}.")
            case _:
                await _show(interaction, None)
                await _tell(interaction, "I don't know this approval any more; nothing was run.")


async def _show(interaction: discord.Interaction, text: str | None) -> None:
    """Edit the pressed card (None: keep its text) and remove its buttons."""
    try:
        if text is None:
            await interaction.edit_original_response(view=None)
        else:
            await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
    except discord.HTTPException as exc:
        log.warning("discord.card_edit_failed: %s", exc)


async def _tell(interaction: discord.Interaction, text: str) -> None:
    try:
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS)
    except discord.HTTPException as exc:
        log.warning("discord.followup_failed: %s", exc)
