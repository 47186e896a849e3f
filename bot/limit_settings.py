"""The `[limits]` table of roost.toml: rate limits and the daily token budget. Hot-reloaded.

```toml
[limits]
owner_exempt = true            # the owner is never limited unless this is false

[limits.user]                  # each user but the owner, counted across all their chats
messages_per_minute = 60       # a flood guard
runs_per_hour = 60             # runs they asked for anywhere (DM, groups, their jobs, workers)
daily_tokens = 300000          # input + output tokens of those runs per local day (ROOST_TIMEZONE)

[limits.group]                 # each group: its topics, isolated jobs and workers together
messages_per_minute = 30
runs_per_hour = 120
daily_tokens = 1000000
```

`tool_calls_per_run = 50` (top level of `[limits]`) caps the tool calls of one run.

```toml
[limits.workers]               # sub-agents started with `spawn`
per_run = 5                    # workers one run may spawn
running = 8                    # workers running at once in the process
max_turns = 6                  # each worker's turn budget
timeout_s = 300                # each worker's time budget
```

0 turns a limit off. Environment: `ROOST_LIMITS__USER__DAILY_TOKENS=0` and so on.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ScopeLimits(BaseModel):
    """Limits for one user or one group; 0 means unlimited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages_per_minute: int = Field(60, ge=0)
    runs_per_hour: int = Field(60, ge=0)
    daily_tokens: int = Field(300_000, ge=0)


class WorkerLimitSettings(BaseModel):
    """Budgets of sub-agents (`spawn`); read live on every spawn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_run: int = Field(5, ge=1, le=20)
    running: int = Field(8, ge=1, le=64)
    max_turns: int = Field(6, ge=1, le=50)
    timeout_s: float = Field(300.0, gt=0, le=3600)


class LimitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    owner_exempt: bool = True
    user: ScopeLimits = ScopeLimits()
    group: ScopeLimits = ScopeLimits(messages_per_minute=30, runs_per_hour=120, daily_tokens=1_000_000)
    workers: WorkerLimitSettings = WorkerLimitSettings()
    tool_calls_per_run: int = Field(50, ge=0)
    """Tool calls one run may make before the runner refuses more (0 = unlimited); the owner's
    main session is exempt while `owner_exempt` is true."""
