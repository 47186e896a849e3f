"""Telegram's approval cards (`adapters.cards.CardSender`): one message per approval, with the
full action and three buttons; the shared `adapters.cards.Cards` syncs them.

Contract:
- On `ApprovalRequested` a card is sent: the tool, the FULL action in a code block, when it
  expires, and the buttons Approve once / Always in this session / Deny (callback_data is
  `ap:<approval_id>:<o|a|d>`, see `callback_data`). An action longer than
  `INLINE_ACTION_UNITS` is sent first as a document (`action.txt`) and the card says so —
  never a truncated preview with live buttons.
- On `ApprovalResolved` the card is edited to show the outcome (approved once / always /
  denied / expired / cancelled, and by whom) and its buttons are removed.
- A card whose send lost its answer is looked for (`find_sent`) before it is sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from adapters.cards import Card, Cards, outcome_text
from adapters.errors import DeliveryUnknown
from adapters.outbox import Outbox
from adapters.render.entities import Entity, Payload
from adapters.render.utf16 import utf16_len
from adapters.telegram.callback_data import CallbackCodec
from adapters.telegram.transport import Keyboard, TelegramTransport
from agent_core.approvals import Decision
from agent_core.ports import ApprovalRecord

log = logging.getLogger(__name__)

INLINE_ACTION_UNITS = 3000
"""Longer actions go into a document: the card must stay far below Telegram's 4096."""
DOCUMENT_NAME = "action.txt"
PLATFORM = "telegram"

Desired = tuple[Payload, Keyboard | None]


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


class TelegramCardSender:
    """Implements `adapters.cards.CardSender` for Telegram (see the module docstring)."""

    platform = PLATFORM

    def __init__(self, codec: CallbackCodec) -> None:
        self._codec = codec

    def keyboard(self, approval_id: str) -> Keyboard:
        c = self._codec
        return (
            (
                ("✅ Approve once", c.approval(approval_id, Decision.ONCE)),
                ("♾ Always in this session", c.approval(approval_id, Decision.ALWAYS)),
            ),
            (("❌ Deny", c.approval(approval_id, Decision.DENY)),),
        )

    def desired(self, card: Card, who: str | None) -> Desired:
        req = card.request
        payload = card_payload(
            req.tool_name,
            req.action,
            req.expires_at,
            decision=card.decision,
            who=who,
            as_document=needs_document(req.action),
        )
        if card.plain:
            payload = payload.plain()
        keyboard = self.keyboard(req.approval_id) if card.decision is None else None
        return payload, keyboard

    async def send(self, card: Card, desired: Desired) -> str:
        transport: TelegramTransport = card.transport
        req = card.request
        if needs_document(req.action) and not card.attachment_sent:
            try:
                await transport.send_document(req.action.encode(), DOCUMENT_NAME, f"Full action of {req.tool_name}")
            except DeliveryUnknown as exc:  # it may be there: a second copy would be worse
                log.warning("cards.document_answer_lost approval=%s: %s", req.approval_id, exc)
            card.attachment_sent = True
        payload, keyboard = desired
        sent = await transport.send_message(payload.text, payload.entities, keyboard)
        return str(sent.message_id)

    async def edit(self, card: Card, desired: Desired) -> None:
        payload, keyboard = desired
        await card.transport.edit_message(card.message_id, payload.text, payload.entities, keyboard)

    async def find(self, card: Card, desired: Desired) -> str | None:
        payload, keyboard = desired
        found: str | None = await card.transport.find_sent(payload.text, payload.entities, keyboard)
        return found

    def ref(self, card: Card) -> str:
        assert card.message_id is not None
        return card_ref(card.transport.chat_id, card.transport.thread_id, card.message_id)


class ApprovalCards(Cards):
    """Every live approval card of one Telegram adapter."""

    def __init__(
        self,
        outbox: Outbox,
        codec: CallbackCodec,
        on_card: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(outbox, TelegramCardSender(codec), on_card)
