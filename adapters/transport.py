"""What the reply renderer needs from a chat platform, stated as one Protocol.

A platform adapter (Telegram via python-telegram-bot, Discord, console) implements
`ChatTransport` for one chat (and thread/topic); `adapters.stream.StreamRenderer` drives it
through a shared `adapters.outbox.Outbox`, which owns pacing, so transports do not pace or
retry 429s themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Protocol, runtime_checkable

from adapters.errors import FormattingRejected, MessageTooLong
from adapters.render.entities import Entity, Payload
from adapters.render.utf16 import Unit, index_for_units, measure

__all__ = ["ChatTransport", "Entity", "LostSendProbe", "Unit", "edit_payload", "send_payload"]

log = logging.getLogger(__name__)


@runtime_checkable
class ChatTransport(Protocol):
    """Sends, edits and deletes messages in one chat.

    Contract for implementers:
    - `send` posts a new message and returns its id. Raise `DeliveryUnknown` when the
      request may have been posted but its answer was lost (read timeout, connection reset
      after writing): it is never retried blindly. Every other error means "not posted"
      and the send may be retried.
    - `edit` replaces a message's text and entities. The platform's "message is not
      modified" answer (Telegram 400) means the message already shows this content: return
      normally, never raise for it.
    - `delete` removes a message; a message already gone is success.
    - `typing` shows the typing indicator once (it lapses by itself after ~5 s).
    - Errors are the `adapters.errors` tree, translated from platform errors with
      `raise ... from exc`: `RateLimited(retry_after)` on 429 / RetryAfter,
      `FormattingRejected` when entities cannot be parsed (the caller retries plain),
      `MessageTooLong`, `MessageGone` when the edit target was deleted, else
      `DeliveryError`.
    - When `renders_markdown` is true, `text` is Markdown source and `entities` is empty.
    - No pacing and no retrying inside: the outbox paces per chat and honours retry_after.
    """

    chat_key: Hashable
    """Identifies the chat for pacing: renderers with equal keys share one pace."""
    limit_units: int
    """Maximum message length (Telegram 4096, Discord 2000)."""
    unit: Unit
    """How `limit_units` counts: "utf16" (Telegram) or "chars" (Discord)."""
    min_edit_interval_s: float
    """Minimum seconds between requests in this chat (Telegram 1.0, Discord 1.2)."""
    renders_markdown: bool
    """True if the platform renders Markdown itself (Discord): send source, no entities."""

    async def send(self, text: str, entities: list[Entity]) -> str: ...

    async def edit(self, message_id: str, text: str, entities: list[Entity]) -> None: ...

    async def delete(self, message_id: str) -> None: ...

    async def typing(self) -> None: ...


@runtime_checkable
class LostSendProbe(Protocol):
    """Optional: a transport that can tell whether a send whose answer was lost
    (`DeliveryUnknown`) posted its message. Without it such a part is given up, never
    resent (a missing part beats a duplicate)."""

    async def find_sent(self, text: str, entities: list[Entity]) -> str | None:
        """The lost message's id if it exists (then it shows exactly `text`), None if it
        provably does not. Raise `DeliveryUnknown` if it cannot tell; other
        `DeliveryError`s are retried."""
        ...


async def send_payload(transport: ChatTransport, payload: Payload) -> str:
    """Send `payload`; on `FormattingRejected` send the same text plain; on
    `MessageTooLong` (our measure disagreed with the platform's) send a shortened plain
    text rather than nothing. Other errors propagate."""
    try:
        return await transport.send(payload.text, list(payload.entities))
    except FormattingRejected:
        if not payload.entities:
            raise
        log.warning("transport.formatting_rejected: sending plain text")
        return await transport.send(payload.text, [])
    except MessageTooLong:
        log.error("transport.too_long units=%d", measure(payload.text, transport.unit))
        return await transport.send(_shortened(transport, payload.text), [])


async def edit_payload(transport: ChatTransport, message_id: str, payload: Payload) -> None:
    """Edit a message to show `payload`, with the same fallbacks as `send_payload`."""
    try:
        await transport.edit(message_id, payload.text, list(payload.entities))
    except FormattingRejected:
        if not payload.entities:
            raise
        log.warning("transport.formatting_rejected: editing as plain text")
        await transport.edit(message_id, payload.text, [])
    except MessageTooLong:
        log.error("transport.too_long units=%d", measure(payload.text, transport.unit))
        await transport.edit(message_id, _shortened(transport, payload.text), [])


def _shortened(transport: ChatTransport, text: str) -> str:
    # Keep 90% of the limit: losing a tail beats losing the whole message.
    return text[: index_for_units(text, transport.limit_units * 9 // 10, transport.unit)] + "…"
