"""Approval cards, the part every platform shares: one message per approval, synced through
the adapter's `Outbox` to its newest desired state.

Contract:
- `show` sends a card for an `ApprovalRequested`; `resolve` makes it show the outcome
  (approved once / always / denied / expired / cancelled, and by whom) without buttons. A
  resolution arriving before the card was even sent yields one message already showing it.
- Every request goes through the shared `Outbox` (per-chat pace, `retry_after` pause); a
  `RateLimited` answer is retried there with the then newest state.
- A send whose answer was lost (`DeliveryUnknown`) is looked for (`CardSender.find`) before
  anything is sent again: a card is never shown twice. Formatting the platform rejected is
  shown as plain text from then on; a card deleted by a user is left alone; other failures
  are retried up to `MAX_ATTEMPTS` times.
- `settle` waits until the given cards show their final state (or failed), then forgets them.

What a card looks like and how it is sent is the platform's: a `CardSender`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from adapters.errors import DeliveryError, DeliveryUnknown, FormattingRejected, MessageGone, RateLimited
from adapters.outbox import Outbox, Pace, Priority
from agent_core.events import ApprovalRequested, ApprovalResolved

log = logging.getLogger(__name__)

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


class CardTransport(Protocol):
    """What the outbox needs to know of the chat a card goes to."""

    chat_key: Hashable
    min_edit_interval_s: float
    pace: Pace | None


@dataclass(slots=True)
class Card:
    request: ApprovalRequested
    transport: Any
    """The platform's transport for the card's chat (a `CardTransport`)."""
    decision: str | None = None
    resolved_by: str | None = None
    via: str | None = None
    """Where it was decided when not on this card (e.g. "dashboard")."""
    message_id: str | None = None
    shown: Any = None
    """The desired state the chat shows (None: nothing yet)."""
    plain: bool = False
    """The platform rejected our formatting once: show plain text from then on."""
    attachment_sent: bool = False
    """A platform that sends a long action as a file before the card has sent it."""
    state: CardState = "live"
    failures: int = 0
    lost: Any = None
    """A desired state whose send lost its answer: looked for before it is ever sent again."""
    key: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.key = ("card", self.request.approval_id)


class CardSender(Protocol):
    """The platform's half of a card: what it shows and how it is sent."""

    platform: str

    def desired(self, card: Card, who: str | None) -> Any:
        """What `card` should show now (comparable: equal means nothing to do); `who` is
        the display name of whoever decided it."""

    async def send(self, card: Card, desired: Any) -> str:
        """Post the card showing `desired`; its message id."""

    async def edit(self, card: Card, desired: Any) -> None:
        """Make the posted card show `desired` (buttons removed once it is decided)."""

    async def find(self, card: Card, desired: Any) -> str | None:
        """The message of a send of `desired` whose answer was lost, or None if it was
        never posted; raises `DeliveryUnknown` if that cannot be told."""

    def ref(self, card: Card) -> str:
        """Where the posted card is (stored, so a restart can close it)."""


class Cards:
    """Every live approval card of one adapter (see the module docstring).

    `names` maps an identity ("telegram:42") to the name shown on a decided card; the
    press handler fills it when someone presses a button."""

    def __init__(
        self,
        outbox: Outbox,
        sender: CardSender,
        on_card: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self._outbox = outbox
        self._sender = sender
        self._on_card = on_card
        """Told (approval id, card ref) once a card exists, so a restart can close it."""
        self._cards: dict[str, Card] = {}
        self._progress = asyncio.Event()
        self.names: dict[str, str] = {}

    def is_live(self, approval_id: str) -> bool:
        return approval_id in self._cards

    def who(self, identity: str | None) -> str | None:
        return None if identity is None else self.names.get(identity, identity)

    # -- events ----------------------------------------------------------------------

    def show(self, transport: Any, event: ApprovalRequested) -> None:
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
        card.decision, card.resolved_by, card.via = event.decision, event.resolved_by, event.via
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

    async def _note(self, card: Card) -> None:
        if self._on_card is None or card.message_id is None:
            return
        try:  # one small row update, rare: cheap enough inside the outbox action
            await self._on_card(card.request.approval_id, self._sender.ref(card))
        except Exception:  # the card works without the note; only restart clean-up needs it
            log.warning("%s.card_note_failed approval=%s", self._sender.platform, card.request.approval_id,
                        exc_info=True)

    # -- delivery (in the outbox worker) ---------------------------------------------

    def _desired(self, card: Card) -> Any:
        who = self.who(card.resolved_by)
        if card.via is not None and who is not None:
            who = f"{who} from the {card.via}"  # "✅ Approved once by Alice from the dashboard"
        return self._sender.desired(card, who)

    def _submit(self, card: Card) -> None:
        if self._outbox.closed:  # shutting down: nothing more will be delivered
            card.state = "failed"
            self._progress.set()
            return

        def dropped() -> None:
            card.state = "failed" if card.state == "live" else card.state
            self._progress.set()

        t: CardTransport = card.transport
        self._outbox.submit(
            t.chat_key,
            card.key,
            lambda: self._sync(card),
            priority=Priority.SEND if card.message_id is None else Priority.EDIT,
            interval=t.min_edit_interval_s,
            pace=t.pace,
            on_drop=dropped,
        )

    async def _find_lost(self, card: Card, lost: Any) -> None:
        """The card's send lost its answer: find it (it shows exactly `lost`) or learn that
        it was never posted (then it is sent on the next turn)."""
        found = await self._sender.find(card, lost)
        card.lost = None
        if found is not None:
            card.message_id, card.shown = found, lost
            await self._note(card)

    async def _show(self, card: Card, desired: Any) -> bool:
        if card.message_id is None:
            card.message_id = await self._sender.send(card, desired)
            await self._note(card)
        elif desired != card.shown:
            await self._sender.edit(card, desired)
        else:
            return False
        return True

    async def _sync(self, card: Card) -> bool:
        if card.state != "live":
            return False
        desired = self._desired(card)
        made_request = True
        platform, approval_id = self._sender.platform, card.request.approval_id
        try:
            if card.lost is not None:
                await self._find_lost(card, card.lost)
            else:
                made_request = await self._show(card, desired)
                card.shown = desired
        except RateLimited:
            raise  # the outbox pauses, then runs this sync again with the newest state
        except FormattingRejected:
            log.warning("%s.card_formatting_rejected approval=%s: showing plain text", platform, approval_id)
            card.plain = True
        except MessageGone:
            card.state = "done"  # the user deleted the card; a button press still works
        except DeliveryUnknown as exc:
            if card.message_id is None and card.lost is None:  # the card may show, id unknown
                log.warning("%s.card_send_answer_lost approval=%s: %s", platform, approval_id, exc)
                card.lost = desired
            elif card.lost is not None:  # cannot tell whether it was posted: never post twice
                log.warning("%s.lost_card_given_up approval=%s: %s", platform, approval_id, exc)
                card.state = "failed"
            # an edit whose answer was lost is simply made again (edits are idempotent)
        except DeliveryError as exc:
            card.failures += 1
            log.warning("%s.card_failed approval=%s attempt=%d: %s", platform, approval_id, card.failures, exc)
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
