"""Rate limits and the daily token budget, per user and per group, checked before a message
is queued for a run.

- messages per minute: a sliding window of admitted messages, in memory (a restart forgets
  at most a minute);
- runs per hour and tokens per local day: counted from the runs table, so they hold across
  restarts. A user's runs are those of their private session; a group's are those of the
  group and all its topics.

A refused sender is told once per window ("… try again at HH:MM"), never on every message,
and the first refusal of a window is written to the audit trail. The owner is exempt unless
`[limits] owner_exempt = false`. Settings are read on every check through a callable, so a
hot-reloaded `[limits]` applies to the next message.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Literal, Protocol

from agent_core.inbound import Inbound
from agent_core.ports import AuditEntry, AuditSink
from bot.limit_settings import LimitSettings, ScopeLimits
from bot.storage.usage import WindowUsage

LimitName = Literal["messages_per_minute", "runs_per_hour", "daily_tokens"]
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


class UsageSource(Protocol):
    async def window_usage(self, session_key: str, since: datetime, *, with_topics: bool = False) -> WindowUsage: ...


@dataclass(frozen=True, slots=True)
class Limited:
    """A message refused by a limit."""

    limit: LimitName
    bucket: str
    """"telegram:42" for a user, "group:telegram:-100…" for a group."""
    retry_at: datetime
    notice: str | None
    """What to tell the sender; None when they were already told in this window."""


@dataclass(frozen=True, slots=True)
class _Bucket:
    key: str
    limits: ScopeLimits
    usage_key: str | None
    """The session whose runs count (None: runs and tokens are not counted for this bucket)."""
    with_topics: bool
    is_group: bool


class RateLimiter:
    """One object shared by every path that starts runs (chat messages now, schedules later)."""

    def __init__(
        self,
        usage: UsageSource,
        audit: AuditSink,
        limits: Callable[[], LimitSettings],
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        tz: tzinfo | None = None,
    ) -> None:
        self._usage = usage
        self._audit = audit
        self._limits = limits
        self._clock = clock
        self._tz = tz
        self._messages: dict[str, collections.deque[datetime]] = {}
        self._told: dict[tuple[str, LimitName], datetime] = {}

    async def check(self, inbound: Inbound, session_key: str, *, is_owner: bool) -> Limited | None:
        """None when the message may be queued (and then it counts); Limited otherwise."""
        settings = self._limits()
        if is_owner and settings.owner_exempt:
            return None
        now = self._clock()
        self._forget_past(now)
        private = inbound.chat_kind == "private"
        # A user's runs and tokens are those of their private session; in a group they count
        # towards the group's (the runs table records sessions, not senders).
        buckets = [_Bucket(inbound.identity, settings.user, session_key if private else None, False, False)]
        if not private:
            group = f"group:{inbound.platform}:{inbound.chat_id}"
            buckets.append(_Bucket(group, settings.group, group, True, True))
        for bucket in buckets:
            hit = await self._over(bucket, now)
            if hit is not None:
                return await self._refuse(inbound, session_key, bucket, *hit, now)
        for bucket in buckets:
            if bucket.limits.messages_per_minute:
                self._messages.setdefault(bucket.key, collections.deque()).append(now)
        return None

    async def _over(self, bucket: _Bucket, now: datetime) -> tuple[LimitName, int, datetime] | None:
        limits = bucket.limits
        if limits.messages_per_minute:
            window = self._messages.get(bucket.key, collections.deque())
            while window and window[0] <= now - MINUTE:
                window.popleft()
            if len(window) >= limits.messages_per_minute:
                return "messages_per_minute", limits.messages_per_minute, window[-limits.messages_per_minute] + MINUTE
        if bucket.usage_key is None:
            return None
        if limits.runs_per_hour:
            hour = await self._usage.window_usage(bucket.usage_key, now - HOUR, with_topics=bucket.with_topics)
            starts = hour.run_starts
            if len(starts) >= limits.runs_per_hour:
                return "runs_per_hour", limits.runs_per_hour, starts[-limits.runs_per_hour] + HOUR
        if limits.daily_tokens:
            midnight, tomorrow = self._day(now)
            day = await self._usage.window_usage(bucket.usage_key, midnight, with_topics=bucket.with_topics)
            if day.tokens >= limits.daily_tokens:
                return "daily_tokens", limits.daily_tokens, tomorrow
        return None

    async def _refuse(
        self, inbound: Inbound, session_key: str, bucket: _Bucket, limit: LimitName, value: int,
        retry_at: datetime, now: datetime,
    ) -> Limited:
        told_until = self._told.get((bucket.key, limit))
        if told_until is not None and now < told_until:
            return Limited(limit, bucket.key, retry_at, None)
        self._told[(bucket.key, limit)] = retry_at
        await self._audit.audit(
            AuditEntry(
                kind="rate_limit",
                actor=inbound.identity,
                session_key=session_key,
                subject=f"{bucket.key} {limit}",
                detail=f"limit {value}; refused until {retry_at.isoformat(timespec='seconds')}",
                decision="limited",
            )
        )
        return Limited(limit, bucket.key, retry_at, self._notice(bucket, limit, value, retry_at, now))

    def _notice(self, bucket: _Bucket, limit: LimitName, value: int, retry_at: datetime, now: datetime) -> str:
        who = "This group has" if bucket.is_group else "You've"
        what = {
            "messages_per_minute": f"reached the limit of {value} messages per minute",
            "runs_per_hour": f"reached the limit of {value} answers per hour",
            "daily_tokens": f"used today's budget of {value:,} tokens",
        }[limit]
        return f"{who} {what}; try again at {self._clock_time(retry_at, now)}."

    def _clock_time(self, at: datetime, now: datetime) -> str:
        """HH:MM in local time, rounded up so the time shown is never still inside the window."""
        local = at.astimezone(self._tz)
        if local.second or local.microsecond:
            local = (local + timedelta(minutes=1)).replace(second=0, microsecond=0)
        day = "" if local.date() == now.astimezone(self._tz).date() else "tomorrow "
        return f"{day}{local:%H:%M}".replace("tomorrow 00:00", "midnight")

    def _day(self, now: datetime) -> tuple[datetime, datetime]:
        """Start of the local day containing `now`, and of the next one (UTC-aware)."""
        local = now.astimezone(self._tz)
        zone = self._tz or local.tzinfo
        start = datetime.combine(local.date(), time(0), tzinfo=zone)
        end = datetime.combine(local.date() + timedelta(days=1), time(0), tzinfo=zone)
        return start.astimezone(UTC), end.astimezone(UTC)

    def _forget_past(self, now: datetime) -> None:
        # Bounded memory: windows that are over and notices whose window ended are dropped.
        for key, until in list(self._told.items()):
            if until <= now:
                del self._told[key]
        for key, window in list(self._messages.items()):
            if not window or window[-1] <= now - MINUTE:
                del self._messages[key]
