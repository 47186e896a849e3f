"""How long to wait before trying a model again: exponential backoff with full jitter, never
sooner than the service's retry-after, never longer than a cap.

Our own ~20 lines rather than tenacity: the decision to retry depends on the model's circuit
breaker and on the fallback chain (a long wait goes to the next model instead), and what is
retried is a half-consumed stream; tenacity's wait/stop callbacks would carry the same logic
plus a dependency.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from agent_core.llm import LLMError, LLMRateLimited


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 2
    """Retries of one model after its first failed attempt (so 1 + max_retries attempts)."""
    base_s: float = 1.0
    max_backoff_s: float = 30.0
    retry_after_cap_s: float = 60.0
    """A retry-after beyond this is capped (a service asking for an hour gets a minute)."""
    wait_for_fallback_s: float = 10.0
    """A wait longer than this goes to the next configured model at once, when there is one."""

    def delay(self, retry: int, error: LLMError, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number `retry` (1-based) after `error`."""
        backoff = rand() * min(self.max_backoff_s, self.base_s * 2 ** (retry - 1))
        if isinstance(error, LLMRateLimited) and error.retry_after is not None:
            # Jitter on top of what the service asked for, so many sessions do not all return
            # in the same instant.
            return min(self.retry_after_cap_s, max(0.0, error.retry_after) + backoff / 4)
        return backoff
