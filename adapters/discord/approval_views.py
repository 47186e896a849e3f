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
- `DiscordCards` is the shared `adapters.cards.Cards` (synced through the `Outbox` to the
  newest desired state) with `DiscordCardSender`; a card whose send lost its answer is
  looked for by its nonce (`find_sent`), never posted twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import discord

from adapters.button_actions import (
    APPROVAL_PREFIX,
    ASK_PREFIX,
    JOB_PREFIX,
    PAIR_PREFIX,
    RESUME_PREFIX,
    ApprovalPress,
    approval_action,
    parse_approval,
)
from adapters.cards import Card, Cards, outcome_text
from adapters.discord.transport import DiscordTransport
from adapters.outbox import Outbox
from agent_core.approvals import Decision, ResolveOutcome
from agent_core.ports import ApprovalRecord

log = logging.getLogger(__name__)

INLINE_ACTION_CHARS = 1500
"""Longer actions go as a file: the card must stay well below Discord's 2000."""
DOCUMENT_NAME = "action.txt"
NOT_YOURS = "This approval isn't yours."
NO_MENTIONS = discord.AllowedMentions.none()
_LABELS = {
    Decision.ONCE: ("✅ Approve once", discord.ButtonStyle.success),
    Decision.ALWAYS: ("♾ Always in this session", discord.ButtonStyle.primary),
    Decision.DENY: ("❌ Deny", discord.ButtonStyle.danger),
}

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


class ApprovalButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=rf"{APPROVAL_PREFIX}(?P<id>[^:]+):(?P<code>[oad])"):
    """One approval button; rebuilt by discord.py from any matching custom_id."""

    def __init__(self, approval_id: str, decision: Decision) -> None:
        label, style = _LABELS[decision]
        super().__init__(discord.ui.Button(label=label, style=style, custom_id=approval_action(approval_id, decision)))
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
    template=rf"{PAIR_PREFIX}(?P<code>[A-Za-z0-9]{{1,32}})|{ASK_PREFIX}[0-9a-f]{{1,32}}:[0-9]{{1,2}}"
    rf"|{RESUME_PREFIX}[0-9a-f]{{1,32}}|{JOB_PREFIX}[a-z_]{{1,16}}:[A-Za-z0-9_-]{{1,64}}",
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


class DiscordCardSender:
    """Implements `adapters.cards.CardSender` for Discord (see the module docstring)."""

    platform = "discord"

    def desired(self, card: Card, who: str | None) -> str:
        req = card.request
        return card_text(req.tool_name, req.action, req.expires_at, decision=card.decision, who=who)

    async def send(self, card: Card, desired: str) -> str:
        transport: DiscordTransport = card.transport
        req = card.request
        view = approval_view(req.approval_id) if card.decision is None else None
        if needs_file(req.action):
            return await transport.send_file(req.action.encode(), DOCUMENT_NAME, desired, view=view)
        return await transport.send(desired, [], view=view)

    async def edit(self, card: Card, desired: str) -> None:
        assert card.message_id is not None
        await card.transport.edit(card.message_id, desired, [], remove_view=card.decision is not None)

    async def find(self, card: Card, desired: str) -> str | None:
        view = approval_view(card.request.approval_id) if card.decision is None else None
        found: str | None = await card.transport.find_sent(desired, [], view=view)
        return found

    def ref(self, card: Card) -> str:
        assert card.message_id is not None
        return card_ref(card.transport.channel.id, card.message_id)


class DiscordCards(Cards):
    """Every live approval card of one Discord adapter."""

    def __init__(self, outbox: Outbox, on_card: Callable[[str, str], Awaitable[None]] | None = None) -> None:
        super().__init__(outbox, DiscordCardSender(), on_card)


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
                if record is not None and not live and not result.elsewhere:  # no run renders this card any more
                    await _show(interaction, record_text(record, self._cards.who(record.resolved_by)))
            case ResolveOutcome.NOT_YOURS:
                await _tell(interaction, NOT_YOURS)
            case ResolveOutcome.ALREADY_DECIDED:
                if record is None:
                    await _tell(interaction, "This approval was already decided.")
                    return
                if not live and not result.elsewhere:  # else the run's own replica shows it
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
            await interaction.edit_original_response(view=None, allowed_mentions=NO_MENTIONS)
        else:
            await interaction.edit_original_response(content=text, view=None, allowed_mentions=NO_MENTIONS)
    except discord.HTTPException as exc:
        log.warning("discord.card_edit_failed: %s", exc)


async def _tell(interaction: discord.Interaction, text: str) -> None:
    try:
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS)
    except discord.HTTPException as exc:
        log.warning("discord.followup_failed: %s", exc)
