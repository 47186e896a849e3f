"""The contract between the composition root and a platform adapter.

An adapter turns platform events into `Inbound` values handed to an `InboundHandler`, and
renders a run's events through a `ReplySink` it creates per reply. It never decides access
or sessions (the router does) and never talks to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from adapters.catch_up import ChannelCursors
from adapters.lead import Leads
from agent_core.approvals import Decision, ResolveResult
from agent_core.events import Event
from agent_core.inbound import Inbound, ReplyTarget
from agent_core.ports import ApprovalRecord


@dataclass(frozen=True, slots=True)
class Button:
    """An inline button on a standalone message. `action` is what the handler receives back,
    e.g. "pair:<code>"; the adapter keeps platform payloads within their limits."""

    label: str
    action: str


@dataclass(frozen=True, slots=True)
class ButtonAnswer:
    """What a press of a `Button` did: `text` for the presser; `done` False when nothing
    changed (shown as an alert, the message left as it is)."""

    text: str
    done: bool = True


@dataclass(frozen=True, slots=True)
class Delivery:
    """Which platform message carries which part of a run's answer (exactly-once replies)."""

    run_id: str
    part_index: int
    platform: str
    chat_id: str
    thread_id: str | None
    message_id: str | None
    text: str
    state: Literal["streaming", "final", "failed"]


@dataclass(frozen=True, slots=True)
class Taken:
    """A message the handler has stored durably (its inbox row is committed) and will route
    when `InboundHandler.handle` is called with it."""

    inbound: Inbound
    inbox_id: int


class ReplySink(Protocol):
    """Renders one run's events into one chat. `handle` is called in event order;
    `aclose` is always called, also after cancellation, and must leave the chat in a final
    state (no half-edited message left looking 'in progress')."""

    async def handle(self, event: Event) -> None: ...

    async def aclose(self, *, cancelled: bool = False) -> None: ...


@runtime_checkable
class OnceSender(Protocol):
    """Optional for an adapter: a standalone message sent by attempts that may be repeated
    (a re-send with backoff, across restarts) and still shows once in the chat."""

    async def send_once(
        self,
        target: ReplyTarget,
        text: str,
        key: str,
        *,
        buttons: Sequence[Button] = (),
        uncertain_for: float | None = None,
    ) -> str:
        """Send `text` (split like `send_text`) as the one delivery `key` names; every
        attempt of it passes the same `key`. `uncertain_for`: seconds since an earlier
        attempt that may have posted (part of) it (None: none may have). Returns the last
        message's id. Raises `DeliveryUnknown` when this attempt may have posted something
        (the next attempt looks for it or is deduplicated by the platform),
        `DeliveryUndecidable` when whether an earlier attempt posted cannot be found out
        (never attempt it again), any other `DeliveryError` when nothing of this attempt
        was posted."""
        ...


class InboundHandler(Protocol):
    """Implemented by the composition root; adapters call it."""

    channel_cursors: ChannelCursors | None
    """Per-channel cursors for an adapter that catches up after a gap (Discord); None: it
    does not (see adapters.catch_up)."""

    leads: Leads | None
    """Replicas share the bot: only the holder of a role's lead opens its one connection
    (adapters.lead); None: this process is the only one, it always connects."""

    async def receive(self, inbound: Inbound) -> bool:
        """Take a message; returns once it is handled or queued, not when answered.
        True when a run will answer it (False: a command, a notice, ignored, or buffered)."""
        ...

    async def take(self, inbound: Inbound) -> Taken | None:
        """`receive`'s first half: store the message; returns once its inbox row is
        committed (None: the update was taken before, nothing to do). An adapter confirms
        the update to its platform only after this returns: a crash after the confirmation
        finds the message in the inbox, a crash before it gets the update again."""
        ...

    async def handle(self, taken: Taken) -> bool:
        """`receive`'s second half: route a taken message (same result as `receive`)."""
        ...

    async def decide(self, approval_id: str, decision: Decision, identity: str) -> ResolveResult:
        """A person pressed an approval button (or answered the terminal prompt)."""
        ...

    async def approve_pairing(self, platform: str, code: str, identity: str) -> str:
        """The owner pressed a pairing button; returns the text to show them."""
        ...

    async def press_button(self, platform: str, action: str, identity: str) -> ButtonAnswer:
        """A person pressed a standalone message's `Button` (e.g. a job's "job:run:<id>")."""
        ...

    async def record_delivery(self, delivery: Delivery) -> None:
        """Persist what a reply message now shows, so a restart never sends it again."""
        ...

    async def note_approval_card(self, approval_id: str, chat_ref: str) -> None:
        """Remember where an approval's card is, so a restart can close it."""
        ...


@runtime_checkable
class NamesApprovers(Protocol):
    """An adapter whose approval cards name who decided (optional)."""

    approver_names: dict[str, str]
    """Display names by identity, learnt from presses here (or given by the replica the press
    reached: a card edited here for a press made there still says "by <name>")."""


@runtime_checkable
class SendsNotices(Protocol):
    """An adapter that can send a best-effort notice (optional; `send_text` otherwise)."""

    async def send_notice(self, target: ReplyTarget, text: str) -> str | None:
        """Like `send_text`, but the notice never takes a slot another message of the chat
        needs: it is dropped unsent (None) if, when its turn comes, another message waits."""
        ...


class Adapter(Protocol):
    platform: str

    async def start(self, handler: InboundHandler) -> None:
        """Connect and begin delivering inbound messages to `handler`."""
        ...

    async def aclose(self) -> None: ...

    def open_reply(self, target: ReplyTarget) -> ReplySink: ...

    async def send_text(self, target: ReplyTarget, text: str, *, buttons: Sequence[Button] = ()) -> str:
        """Send a short standalone message (notices, scheduled messages, send_message).
        Returns the platform message id; raises on delivery failure."""
        ...

    async def close_expired_card(self, record: ApprovalRecord) -> None:
        """After a restart: edit the card of an approval that expired with the old process
        (`record.chat_ref` says where it is) to show that, and remove its buttons."""
        ...

    async def mark_interrupted(self, delivery: Delivery) -> None:
        """After a restart: finish a reply cut off mid-stream by editing its message in place
        (never sending the text again)."""
        ...

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        """Whether the platform says `user_id` administers the group `chat_id` (may answer
        from a short cache). False where the platform has no such notion; raises
        `DeliveryError` when it could not say (the caller refuses rather than guesses)."""
        ...
