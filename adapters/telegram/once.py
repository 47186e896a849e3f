"""`OnceSender` for Telegram: the attempts of one keyed send in this process.

The Bot API has no idempotency key, so what an earlier attempt left in the chat is kept
here, per key: how many of the message's chunks were posted, and whether the send of the
next one lost its answer. A lost chunk is looked for with the transport's probe
(`TelegramTransport.find_sent`, the check the streamed replies use) before anything is sent
again. Without that memory (a new process) nothing can be looked for: the attempt refuses
(`DeliveryUndecidable`) rather than post a possible duplicate.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from adapters.errors import DeliveryError, DeliveryUndecidable, DeliveryUnknown
from adapters.outbox import Outbox
from adapters.pacing import through_outbox
from adapters.telegram.transport import Keyboard, TelegramTransport

log = logging.getLogger(__name__)

KEPT = 256
"""Keys whose progress is remembered (oldest forgotten first)."""


@dataclass
class _Progress:
    transport: TelegramTransport
    """Holds the lost send's probe start, so it stays with the key."""
    posted: int = 0
    lost: bool = False
    """The send of chunk `posted` lost its answer: it may be in the chat."""
    last_id: str = ""


class OnceSends:
    def __init__(self) -> None:
        self._progress: OrderedDict[str, _Progress] = OrderedDict()

    async def send(
        self,
        outbox: Outbox,
        new_transport: TelegramTransport,
        chunks: Sequence[tuple[str, Keyboard | None]],
        key: str,
        *,
        uncertain: bool,
    ) -> str:
        progress = self._progress.get(key)
        if progress is None:
            if uncertain:
                raise DeliveryUndecidable("an earlier attempt may have posted it, and this process cannot look for it")
            progress = self._progress[key] = _Progress(new_transport)
            while len(self._progress) > KEPT:
                self._progress.popitem(last=False)
        transport = progress.transport
        while progress.posted < len(chunks):
            text, keyboard = chunks[progress.posted]
            if progress.lost:
                found = await self._look(outbox, transport, key, text, keyboard)
                progress.lost = False
                if found is not None:
                    progress.posted, progress.last_id = progress.posted + 1, found
                    continue

            async def post(text: str = text, keyboard: Keyboard | None = keyboard) -> str:
                return str((await transport.send_message(text, (), keyboard)).message_id)

            try:
                message_id = await through_outbox(
                    outbox, transport.chat_key, post, interval=transport.min_edit_interval_s, pace=transport.pace
                )
            except DeliveryUnknown:
                progress.lost = True
                raise
            except DeliveryError as exc:
                if progress.posted:  # the earlier chunks show: the next attempt continues after them
                    raise DeliveryUnknown(f"{progress.posted} of {len(chunks)} parts posted; then {exc}") from exc
                raise
            progress.posted, progress.last_id = progress.posted + 1, message_id
        del self._progress[key]
        return progress.last_id

    async def _look(
        self, outbox: Outbox, transport: TelegramTransport, key: str, text: str, keyboard: Keyboard | None
    ) -> str | None:
        try:
            found: str | None = await through_outbox(
                outbox, transport.chat_key, lambda: transport.find_sent(text, (), keyboard),
                interval=transport.min_edit_interval_s, pace=transport.pace,
            )
        except DeliveryUndecidable:
            raise
        except DeliveryUnknown as exc:  # the probe cannot tell: never post it blindly
            self._progress.pop(key, None)
            raise DeliveryUndecidable(str(exc)) from exc
        except DeliveryError as exc:  # the probe itself failed: look again next attempt
            raise DeliveryUnknown(f"could not look for the lost message yet: {exc}") from exc
        log.info("telegram.once_lost_send_%s key=%s", "found" if found else "absent", key[:12])
        return found
