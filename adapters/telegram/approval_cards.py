"""Approval cards: one message per approval, with the full action and three buttons.

Contract:
- On `ApprovalRequested` a card is sent: the tool, the FULL action in a code block, when it
  expires, and the buttons Approve once / Always in this session / Deny (callback_data is
  `ap:<approval_id>:<o|a|d>`, see `callback_data`). An action longer than
  `INLINE_ACTION_UNITS` is sent first as a document (`action.txt`) and the card says so —
  never a truncated preview with live buttons.
- On `ApprovalResolved` the card is edited to show the outcome (approved once / always /
  denied / expired / cancelled, and by whom) and its buttons are removed.
- Cards are delivered through the shared `Outbox` (per-chat pace, `retry_after` pause); a
  card is synced to its newest desired state, so a resolution arriving before the card was
  even sent yields one message already showing the outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from agent_core.approvals import Decision
from agent_core.events import ApprovalRequested, ApprovalResolved
from agent_core.ports import ApprovalRecord

from adapters.errors import DeliveryError, DeliveryUnknown, FormattingRejected, MessageGone, RateLimited
from adapters.outbox import Outbox, Priority
from adapters.render.entities import Entity, Payload
from adapters.render.utf16 import utf16_len
from adapters.telegram.callback_data import CallbackCodec
from adapters.telegram.transport import Keyboard, TelegramTransport

log = logging.getLogger(__name__)

INLINE_ACTION_UNITS = 3000
"""Longer actions go into a document: the card must stay far below Telegram's 4096."""
DOCUMENT_NAME = "action.txt"
MAX_ATTEMPTS = 3

CardState = Literal["live", "done", "failed"]

_OUTCOMES = {
    "once": "✅ Approved once",
    "always": "✅ Always allowed in this session",
    "deny": "❌ Denied",
    "expired": "⌛ Expired — not run",
    "cancelled": "⏹ Cancelled — the run was stopped",
}


def outcome_text(decision: str, who: str | None) -> str:
    """E.g. "✅ Approved once by Alice"; expiry and cancellation name nobody."""
    text = _OUTCOMES.get(decision, decision)
    if who and decision in ("once", "always", "deny"):
        text += f" by {who}"
    return text


def card_payload(
    tool_name: str,
    action: str,
    expires_at: datetime,
    *,
    decision: str | None,
    who: str | None,
    as_document: bool,
) -> Payload:
    """What a card shows; the action sits between a header and a footer line so Telegram's
    trimming of leading/trailing whitespace can never shift the entities."""
    pending = decision is None
    header = f"🔐 {tool_name} {'wants' if pending else 'wanted'} to run:"
    if pending:
        footer = f"⏳ Waiting for your decision (expires {expires_at:%H:%M} UTC)."
    else:
        footer = outcome_text(decision, who) + "."
    entities = [Entity("bold", 0, utf16_len(header))]
    if as_document:
        body = (
            f"The full action ({len(action):,} characters) is in the attached file "
            f"{DOCUMENT_NAME} above — read it before deciding."
        )
        text = f"{header}\n{body}\n{footer}"
    else:
        shown = action if action.strip() else "(no details)"
        start = utf16_len(header) + 1
        entities.append(Entity("pre", start, utf16_len(shown)))
        text = f"{header}\n{shown}\n{footer}"
    if not pending:
        entities.append(Entity("bold", utf16_len(text) - utf16_len(footer), utf16_len(footer)))
    return Payload(text, tuple(entities))


def record_payload(record: ApprovalRecord, who: str | None) -> Payload:
    """The card of a decided approval, from its database row (no live run renders it)."""
    decision = None if record.state == "pending" else record.state
    return card_payload(
        record.tool_name,
        record.action,
        record.expires_at,
        decision=decision,
        who=who,
        as_document=needs_document(record.action),
    )


def card_ref(chat_id: int | str, thread_id: int | str | None, message_id: str) -> str:
    """Where a card is: "telegram:<chat>:<thread or empty>:<message>"."""
    return f"telegram:{chat_id}:{thread_id if thread_id is not None else ''}:{message_id}"


def parse_card_ref(ref: str) -> tuple[str, int | None, str] | None:
    """(chat, thread, message) of a card_ref, or None if it is not one of ours."""
    parts = ref.split(":")
    if len(parts) != 4 or parts[0] != "telegram" or not parts[3]:
        return None
    return parts[1], int(parts[2]) if parts[2] else None, parts[3]


def needs_document(action: str) -> bool:
    return utf16_len(action) > INLINE_ACTION_UNITS


@dataclass(slots=True)
class Card:
    request: ApprovalRequested
    transport: TelegramTransport
    decision: str | None = None
    resolved_by: str | None = None
    message_id: str | None = None
    document_sent: bool = False
    shown: tuple[Payload, Keyboard | None] | None = None
    plain: bool = False
    """Telegram rejected our entities once: show plain text from then on."""
    state: CardState = "live"
    failures: int = 0
    lost: tuple[Payload, Keyboard | None] | None = None
    """A card sent whose answer was lost: looked for before it is ever sent again."""
    key: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = ("card", self.request.approval_id)

    @property
    def as_document(self) -> bool:
        return needs_document(self.request.action)


class ApprovalCards:
    """Every live approval card of one adapter (see the module docstring).

    `names` maps an identity ("telegram:42") to the name shown on a decided card; the
    callback handler fills it when someone presses a button."""

    def __init__(
        self,
        outbox: Outbox,
        codec: CallbackCodec,
        on_card: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self._outbox = outbox
        self._codec = codec
        self._on_card = on_card
        """Told (approval id, chat_ref) once a card exists, so a restart can close it."""
        self._cards: dict[str, Card] = {}
        self._progress = asyncio.Event()
        self.names: dict[str, str] = {}

    def is_live(self, approval_id: str) -> bool:
        return approval_id in self._cards

    def who(self, identity: str | None) -> str | None:
        return None if identity is None else self.names.get(identity, identity)

    def keyboard(self, approval_id: str) -> Keyboard:
        c = self._codec
        return (
            (
                ("✅ Approve once", c.approval(approval_id, Decision.ONCE)),
                ("♾ Always in this session", c.approval(approval_id, Decision.ALWAYS)),
            ),
            (("❌ Deny", c.approval(approval_id, Decision.DENY)),),
        )

    # -- events ----------------------------------------------------------------------

    def show(self, transport: TelegramTransport, event: ApprovalRequested) -> None:
        card = Card(event, transport)
        self._cards[event.approval_id] = card
        self._submit(card)

    def resolve(self, event: ApprovalResolved, *, only_pending: bool = False) -> None:
        """Show the outcome; with `only_pending`, only if no outcome is known yet."""
        card = self._cards.get(event.approval_id)
        if card is None:
            log.debug("cards.resolved_unknown approval=%s", event.approval_id)
            return
        if only_pending and card.decision is not None:
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

    async def _note(self, card: Card) -> None:
        if self._on_card is None or card.message_id is None:
            return
        transport = card.transport
        ref = card_ref(transport.chat_id, transport.thread_id, card.message_id)
        try:  # one small row update, rare: cheap enough inside the outbox action
            await self._on_card(card.request.approval_id, ref)
        except Exception:
            log.warning("cards.note_failed approval=%s", card.request.approval_id, exc_info=True)

    def _pending(self, approval_id: str) -> bool:
        card = self._cards.get(approval_id)
        if card is None or card.state != "live":
            return False
        if self._outbox.closed:
            card.state = "failed"
            return False
        return True

    # -- delivery (in the outbox worker) ---------------------------------------------

    def _desired(self, card: Card) -> tuple[Payload, Keyboard | None]:
        req = card.request
        payload = card_payload(
            req.tool_name,
            req.action,
            req.expires_at,
            decision=card.decision,
            who=self.who(card.resolved_by),
            as_document=card.as_document,
        )
        if card.plain:
            payload = payload.plain()
        keyboard = self.keyboard(req.approval_id) if card.decision is None else None
        return payload, keyboard

    def _submit(self, card: Card) -> None:
        if self._outbox.closed:  # shutting down: nothing more will be delivered
            card.state = "failed"
            self._progress.set()
            return

        def dropped() -> None:
            card.state = "failed" if card.state == "live" else card.state
            self._progress.set()

        priority = Priority.SEND if card.message_id is None else Priority.EDIT
        self._outbox.submit(
            card.transport.chat_key,
            card.key,
            lambda: self._sync(card),
            priority=priority,
            interval=card.transport.min_edit_interval_s,
            pace=card.transport.pace,
            on_drop=dropped,
        )

    async def _find_lost(self, card: Card, lost: tuple[Payload, Keyboard | None]) -> None:
        """The card's send lost its answer: find it (it shows exactly `lost`) or learn that
        it was never posted (then it is sent on the next turn)."""
        payload, keyboard = lost
        found = await card.transport.find_sent(payload.text, payload.entities, keyboard)
        card.lost = None
        if found is not None:
            card.message_id, card.shown = found, lost
            await self._note(card)

    async def _show(self, card: Card, desired: tuple[Payload, Keyboard | None]) -> None:
        if card.as_document and not card.document_sent:
            try:
                await card.transport.send_document(
                    card.request.action.encode(), DOCUMENT_NAME, f"Full action of {card.request.tool_name}"
                )
            except DeliveryUnknown as exc:  # it may be there: a second copy would be worse
                log.warning("cards.document_answer_lost approval=%s: %s", card.request.approval_id, exc)
            card.document_sent = True
        payload, keyboard = desired
        if card.message_id is None:
            sent = await card.transport.send_message(payload.text, payload.entities, keyboard)
            card.message_id = str(sent.message_id)
            await self._note(card)
        elif desired != card.shown:
            await card.transport.edit_message(card.message_id, payload.text, payload.entities, keyboard)

    async def _sync(self, card: Card) -> bool:
        if card.state != "live":
            return False
        desired = self._desired(card)
        made_request = True
        try:
            if card.lost is not None:
                await self._find_lost(card, card.lost)
            else:
                made_request = (
                    card.message_id is None
                    or desired != card.shown
                    or (card.as_document and not card.document_sent)
                )
                await self._show(card, desired)
                card.shown = desired
        except RateLimited:
            raise  # the outbox pauses, then runs this sync again with the newest state
        except FormattingRejected:
            log.warning("cards.formatting_rejected approval=%s: showing plain text", card.request.approval_id)
            card.plain = True
        except MessageGone:
            card.state = "done"  # the user deleted the card; a button press still works
        except DeliveryUnknown as exc:
            if card.message_id is None and card.lost is None:  # the card may show, id unknown
                log.warning("cards.send_answer_lost approval=%s: %s", card.request.approval_id, exc)
                card.lost = desired
            elif card.lost is not None:  # cannot tell whether it was posted: never post twice
                log.warning("cards.lost_card_given_up approval=%s: %s", card.request.approval_id, exc)
                card.state = "failed"
            # an edit whose answer was lost is simply made again (edits are idempotent)
        except DeliveryError as exc:
            card.failures += 1
            log.warning("cards.delivery_failed approval=%s attempt=%d: %s",
                        card.request.approval_id, card.failures, exc)
            if card.failures >= MAX_ATTEMPTS:
                card.state = "failed"
        if card.state == "live":
            if card.shown == self._desired(card):
                if card.decision is not None:
                    card.state = "done"
            else:
                self._submit(card)  # changed meanwhile, or a retry: paced like any request
        self._progress.set()
        return made_request
