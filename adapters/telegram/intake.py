"""PTB's update queue, made durable: an update is confirmed to Telegram only once it is taken.

PTB's `Updater` confirms an update as soon as `update_queue.put(update)` returns: in polling
the next getUpdates carries an offset past it (the offset advances after the whole batch is
put), and in webhook mode the handler answers 200 after `put`. With a plain queue that is
before anything is stored, and a process killed in between loses the update.

`Intake.put` returns only when the update is taken: a message stored in the inbox
(committed), a button press handed on, anything else ignored. If taking fails it raises
`IntakeFailed`, a `TelegramError`: PTB's polling loop then logs it, backs off and asks
again with the same offset (any other exception would end the polling task), and the
webhook answers 500, which Telegram retries. Either way the update is delivered again;
what a failed batch had already stored is a duplicate then, answered once.
Nothing is ever queued here: `get` is not used by the `Updater`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from telegram.error import TelegramError

log = logging.getLogger(__name__)

Take = Callable[[object], Awaitable[None]]


class IntakeFailed(TelegramError):
    """An update could not be taken; it stays unconfirmed and Telegram delivers it again."""


class Intake(asyncio.Queue[object]):
    """The `update_queue` given to PTB's `Updater`; see the module docstring."""

    def __init__(self, take: Take) -> None:
        super().__init__()
        self._take = take

    async def put(self, item: object) -> None:
        try:
            await self._take(item)
        except Exception as exc:  # the boundary PTB reads: only a TelegramError is retried
            log.exception("telegram.intake_failed")
            raise IntakeFailed(f"update not taken: {type(exc).__name__}") from exc

    def put_nowait(self, item: object) -> None:
        raise RuntimeError("an update is taken by awaiting Intake.put, never queued")
