"""The `[limits]` table of roost.toml: rate limits and the daily token budget. Hot-reloaded.

Skeleton: the rate limiter fills this in (messages per minute, runs per hour, tool calls per
run, daily token budget; per user and per group; owner exempt by default).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LimitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
