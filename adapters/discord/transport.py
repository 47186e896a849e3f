"""`ChatTransport` for one Discord channel (or thread) over discord.py's REST client.

Every send and edit carries `allowed_mentions` that parses nothing, so a model writing
`@everyone` or `<@id>` pings nobody. Sends carry a nonce with `enforce_nonce`: Discord
answers a repeated nonce with the message already posted, so a send whose answer was lost
is looked for (`find_sent`) by sending it again with the same nonce — it either returns the
message that exists or posts the one that never arrived, never a second copy.

discord.py errors become `adapters.errors` types here (`translate`).
"""

from __future__ import annotations

import asyncio
import io
import logging
import secrets
from collections.abc import Hashable

import aiohttp
import discord

from adapters.errors import DeliveryError, DeliveryUnknown, MessageGone, MessageTooLong, RateLimited
from adapters.outbox import Pace
from adapters.render.entities import Entity
from adapters.render.utf16 import Unit

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
EDIT_INTERVAL_S = 1.2
NO_MENTIONS = discord.AllowedMentions.none()
UNKNOWN_MESSAGE = 10008
INVALID_FORM_BODY = 50035
_LOST_NONCES = 64
Attachment = tuple[bytes, str]
"""A file sent with a message: (data, filename)."""


def translate(exc: BaseException, *, sending: bool) -> DeliveryError:
    """A discord.py / aiohttp failure as a `DeliveryError` (see adapters.errors)."""
    if isinstance(exc, discord.RateLimited):
        return RateLimited(exc.retry_after, str(exc))
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            return RateLimited(1.0, str(exc))
        if exc.code == UNKNOWN_MESSAGE:
            return MessageGone(str(exc))
        if exc.code == INVALID_FORM_BODY and "content" in exc.text and "length" in exc.text:
            return MessageTooLong(str(exc))
        if isinstance(exc, discord.DiscordServerError) and sending:
            return DeliveryUnknown(str(exc))  # a 5xx after retries: it may have been posted
        return DeliveryError(str(exc))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return DeliveryError(f"cannot connect: {exc}")  # nothing was written
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
        return DeliveryUnknown(f"{type(exc).__name__}: {exc}") if sending else DeliveryError(str(exc))
    return DeliveryError(f"{type(exc).__name__}: {exc}")


_FAILURES = (discord.DiscordException, aiohttp.ClientError, asyncio.TimeoutError, OSError)


class DiscordTransport:
    """Implements `adapters.transport.ChatTransport` and `LostSendProbe` for one channel."""

    limit_units: int = DISCORD_LIMIT
    unit: Unit = "chars"
    renders_markdown: bool = True

    def __init__(
        self,
        channel: discord.PartialMessageable,
        *,
        reply_to: int | None = None,
        interval_s: float = EDIT_INTERVAL_S,
    ) -> None:
        self.channel = channel
        self.chat_key: Hashable = ("discord", channel.id)
        self.min_edit_interval_s = interval_s
        self.pace: Pace | None = None
        """Discord paces by `min_edit_interval_s` alone (discord.py handles its buckets)."""
        self._reply_to = reply_to
        self._lost: dict[str, tuple[str, Attachment | None]] = {}
        """Text of a send whose answer was lost → the nonce (and file) it went with."""

    def _reference(self) -> discord.MessageReference | None:
        if self._reply_to is None:
            return None
        reply_to, self._reply_to = self._reply_to, None  # only the first message answers
        return discord.MessageReference(message_id=reply_to, channel_id=self.channel.id, fail_if_not_exists=False)

    async def send(
        self, text: str, entities: list[Entity], *, view: discord.ui.View | None = None, nonce: str | None = None
    ) -> str:
        """`nonce`: the caller's, when attempts of one delivery must share it (else a fresh one)."""
        nonce = nonce or secrets.token_hex(8)
        reference = self._reference()
        try:
            message = await self._post(text, nonce, reference, view)
        except _FAILURES as exc:
            error = translate(exc, sending=True)
            if isinstance(error, DeliveryUnknown):
                self._remember_lost(text, nonce, None)
            elif reference is not None:
                self._reply_to = reference.message_id  # not posted: the retry still answers
            raise error from exc
        return str(message.id)

    async def _post(
        self,
        text: str,
        nonce: str,
        reference: discord.MessageReference | None,
        view: discord.ui.View | None,
        attachment: Attachment | None = None,
    ) -> discord.Message:
        kwargs: dict[str, object] = {"allowed_mentions": NO_MENTIONS, "nonce": nonce, "reference": reference}
        if view is not None:
            kwargs["view"] = view
        if attachment is not None:
            data, filename = attachment
            kwargs["file"] = discord.File(io.BytesIO(data), filename=filename)
        return await self.channel.send(text, **kwargs)  # type: ignore[arg-type]

    def _remember_lost(self, text: str, nonce: str, attachment: Attachment | None) -> None:
        self._lost[text] = (nonce, attachment)
        while len(self._lost) > _LOST_NONCES:
            self._lost.pop(next(iter(self._lost)))

    async def find_sent(
        self, text: str, entities: list[Entity], *, view: discord.ui.View | None = None
    ) -> str | None:
        """Send again with the lost send's nonce: Discord returns the message if it exists
        (and posts it, with `view`, if it never was)."""
        lost = self._lost.get(text)
        if lost is None:
            raise DeliveryUnknown("no nonce for this text: cannot tell whether it was posted")
        nonce, attachment = lost
        try:
            message = await self._post(text, nonce, None, view, attachment)
        except _FAILURES as exc:
            raise translate(exc, sending=True) from exc
        self._lost.pop(text, None)
        return str(message.id)

    async def edit(
        self, message_id: str, text: str, entities: list[Entity], *, view: discord.ui.View | None = None,
        remove_view: bool = False,
    ) -> None:
        kwargs: dict[str, object] = {"content": text, "allowed_mentions": NO_MENTIONS}
        if view is not None or remove_view:
            kwargs["view"] = view
        try:
            await self.channel.get_partial_message(int(message_id)).edit(**kwargs)  # type: ignore[arg-type]
        except _FAILURES as exc:
            raise translate(exc, sending=False) from exc

    async def delete(self, message_id: str) -> None:
        try:
            await self.channel.get_partial_message(int(message_id)).delete()
        except discord.NotFound:
            return  # already gone: success
        except _FAILURES as exc:
            raise translate(exc, sending=False) from exc

    async def send_file(self, data: bytes, filename: str, text: str, *, view: discord.ui.View | None = None) -> str:
        """A message with one attached file; like `send`, with a nonce (a lost answer is
        looked for with `find_sent`, which posts the file again under the same nonce)."""
        nonce = secrets.token_hex(8)
        try:
            message = await self._post(text, nonce, None, view, (data, filename))
        except _FAILURES as exc:
            error = translate(exc, sending=True)
            if isinstance(error, DeliveryUnknown):
                self._remember_lost(text, nonce, (data, filename))
            raise error from exc
        return str(message.id)

    async def typing(self) -> None:
        try:
            await self.channel.typing()
        except _FAILURES as exc:
            raise translate(exc, sending=False) from exc
