"""One-off platform requests (notices, card edits, button answers) through the adapter's
shared `Outbox`, so they obey the same per-chat pace and `retry_after` pause as streaming.

`through_outbox` returns the request's result or raises its `DeliveryError`; a
`RateLimited` answer pauses the outbox and the request is retried there (the request has
not taken effect, so retrying cannot duplicate it). If the outbox closes first, it raises
`DeliveryError`. Cancelling the caller withdraws a request not yet started. Nothing else is
retried here: a `DeliveryUnknown` (the answer was lost; the message may exist) goes to the
caller as is, so a one-off notice is never posted twice. A `best_effort` request (a
"⏳ Got it" notice) raises `Superseded` when the outbox drops it unsent, its turn being
wanted by another message of the chat.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from adapters.errors import DeliveryError, RateLimited, Superseded
from adapters.outbox import Outbox, Pace, Priority

T = TypeVar("T")
_ids = itertools.count()


async def through_outbox(
    outbox: Outbox,
    chat: Hashable,
    request: Callable[[], Awaitable[T]],
    *,
    interval: float,
    priority: Priority = Priority.SEND,
    pace: Pace | None = None,
    best_effort: bool = False,
) -> T:
    """Run `request` in the outbox worker when `chat` may be sent to; see the module docstring."""
    if outbox.closed:
        raise DeliveryError("the adapter is closed")
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    key = ("once", next(_ids))

    async def action() -> bool:
        if done.done():  # the caller gave up
            return False
        try:
            result = await request()
        except RateLimited:
            raise  # the outbox pauses and runs this action again
        except Exception as exc:  # handed to the caller, who decides
            if not done.done():
                done.set_exception(exc)
            return True
        if not done.done():
            done.set_result(result)
        return True

    def dropped() -> None:
        if not done.done():
            done.set_exception(
                DeliveryError("the adapter closed before sending")
                if outbox.closed
                else Superseded("dropped: another message of the chat was waiting")
            )

    outbox.submit(
        chat, key, action, priority=priority, interval=interval, pace=pace, on_drop=dropped, best_effort=best_effort
    )
    try:
        return await done
    except asyncio.CancelledError:
        outbox.discard(key)
        raise
