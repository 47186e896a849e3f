"""PTB's `AIORateLimiter`, with chat actions left out of it.

PTB counts every request that names a group against that group's 20-a-minute limiter, the
typing indicator included. Our outbox already paces a group's messages to that limit, so a
reply's typing action plus its message made two requests per reply: past the limiter's
burst, every message slept inside PTB for a slot the indicator had taken, and replies came
about twice as late as Telegram requires. A chat action is best-effort (a refused one only
delays the next indicator, see `adapters.stream`), so it goes straight to the Bot API and
never takes a slot a message needs. Everything else is limited as PTB does it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from telegram.ext import AIORateLimiter

BEST_EFFORT_ENDPOINTS = frozenset({"sendChatAction"})

JSONResult = bool | dict[str, Any] | list[dict[str, Any]]


class RateLimiter(AIORateLimiter):
    """See the module docstring."""

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, JSONResult]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> JSONResult:
        if endpoint in BEST_EFFORT_ENDPOINTS:
            return await callback(*args, **kwargs)
        return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)
