"""The `[policy]` table of roost.toml: who may run which tools where. Hot-reloaded.

Skeleton: the policy engine fills this in (scope × risk class × tool → allow / ask / deny,
per-group overrides, extra workspace roots shared with a group).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PolicySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
