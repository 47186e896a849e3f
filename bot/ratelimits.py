"""Rate limits and the daily token budget, per user and per group: checked before a message
is queued for a run, and the daily budget again before each of a run's model calls.

- messages per minute: a sliding window of admitted messages, per user and per group: in
  memory for one process (a restart forgets at most a minute); with replicas on one
  PostgreSQL, in the database (bot.storage.limits), admitted atomically, so N replicas
  together admit the limit, not N times it;
- runs per hour and tokens per local day (midnight to midnight in ROOST_TIMEZONE, not a
  rolling 24 hours): counted from the runs table, so they hold across restarts. A run counts
  against the person who asked (in any chat: their DM, groups, their jobs; of messages
  answered together, the last one's sender) and against the chat it was made for (a group
  with all its topics, its isolated jobs and the workers its runs spawned). A running run has
  stored what it spent up to its last model call (`note_usage`), whichever replica runs it.
- before each model call (`RunBudget`), the first included: a run whose user or group has
  reached the daily budget ends before its next call, with a message saying so — also a run
  of a message admitted under the cap that waited while another run crossed it. So the cap
  is overspent by at most one turn (one model call's input + output tokens) per run going at
  once (a parent and each of its workers count as runs; on any replica).

A refused sender is told once per window ("… try again at HH:MM"), never on every message,
and the first refusal of a window is written to the audit trail (across replicas: by the
one that refused first). The owner is exempt unless
`[limits] owner_exempt = false` (their jobs in a sub scope still meet that chat's budget).
Settings are read on every check through a callable, so a hot-reloaded `[limits]` applies to
the next message.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Literal, Protocol

from agent_core.events import Usage
from agent_core.inbound import Inbound
from agent_core.loop import RunRequest
from agent_core.ports import AuditEntry, AuditSink
from agent_core.risk import Scope
from bot.limit_settings import LimitSettings, ScopeLimits
from bot.session_keys import origin_of, scope_of
from bot.storage.usage import Charge, WindowUsage

LimitName = Literal["messages_per_minute", "runs_per_hour", "daily_tokens"]
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


class UsageSource(Protocol):
    async def window_usage(
        self, since: datetime, *, account: str | None = None, with_topics: bool = False, requester: str | None = None
    ) -> WindowUsage: ...

    async def tokens_charged(self, since: datetime, charges: Sequence[Charge]) -> list[int]: ...


class MessageWindows(Protocol):
    """Admitted messages per bucket over the last minute, and which refusals were told."""

    async def windows_full(self, buckets: Sequence[tuple[str, int]], now: datetime) -> list[datetime | None]:
        """Per (bucket, limit): when the window of `limit` messages frees a place; None when
        it has room."""
        ...

    async def admit_messages(self, buckets: Sequence[tuple[str, int]], now: datetime) -> tuple[str, datetime] | None:
        """Count a message against every (bucket, limit) unless one is full (then that
        bucket and when it frees a place, nothing counted): all or none, atomically."""
        ...

    async def first_refusal(self, bucket: str, limit: str, until: datetime, now: datetime) -> bool:
        """Whether the sender is to be told (the window's first refusal by this limit)."""
        ...


class MemoryWindows:
    """`MessageWindows` of one process: bounded memory, forgotten by a restart."""

    def __init__(self) -> None:
        self._messages: dict[str, collections.deque[datetime]] = {}
        self._told: dict[tuple[str, str], datetime] = {}

    async def windows_full(self, buckets: Sequence[tuple[str, int]], now: datetime) -> list[datetime | None]:
        return [self._full(bucket, limit, now) for bucket, limit in buckets]

    def _full(self, bucket: str, limit: int, now: datetime) -> datetime | None:
        window = self._messages.get(bucket)
        if window is None:
            return None
        while window and window[0] <= now - MINUTE:
            window.popleft()
        return window[-limit] + MINUTE if len(window) >= limit else None

    async def admit_messages(self, buckets: Sequence[tuple[str, int]], now: datetime) -> tuple[str, datetime] | None:
        self._forget_past(now)
        for bucket, limit in buckets:
            if (free_at := self._full(bucket, limit, now)) is not None:
                return bucket, free_at
        for bucket, _ in buckets:
            self._messages.setdefault(bucket, collections.deque()).append(now)
        return None

    async def first_refusal(self, bucket: str, limit: str, until: datetime, now: datetime) -> bool:
        told_until = self._told.get((bucket, limit))
        if told_until is not None and now < told_until:
            return False
        self._told[(bucket, limit)] = until
        return True

    def _forget_past(self, now: datetime) -> None:
        # Bounded memory: windows that are over and notices whose window ended are dropped.
        for key, until in list(self._told.items()):
            if until <= now:
                del self._told[key]
        for key, window in list(self._messages.items()):
            if not window or window[-1] <= now - MINUTE:
                del self._messages[key]


class UsageNotes(Protocol):
    async def note_usage(self, run_id: str, turns: int, usage: Usage) -> None: ...


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
    is_group: bool

    async def run_starts(self, source: UsageSource, since: datetime) -> list[datetime]:
        if self.is_group:  # the group's runs, its topics', its jobs' and their workers'
            return (await source.window_usage(since, account=self.key, with_topics=True)).run_starts
        return (await source.window_usage(since, requester=self.key)).run_starts  # the person's, everywhere

    @property
    def charge(self) -> Charge:
        return Charge(account=self.key, with_topics=True) if self.is_group else Charge(requester=self.key)

    async def tokens(self, source: UsageSource, since: datetime) -> int:
        (tokens,) = await source.tokens_charged(since, [self.charge])
        return tokens


def group_of(key: str) -> str | None:
    """The group a session's spend counts against ("group:telegram:-100" for any of its
    topics and isolated jobs), or None outside groups."""
    origin = origin_of(key)
    if not origin.startswith("group:"):
        return None
    return ":".join(origin.split(":")[:3])


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
        windows: MessageWindows | None = None,
    ) -> None:
        self._usage = usage
        self._audit = audit
        self._limits = limits
        self._clock = clock
        self._tz = tz
        self._windows: MessageWindows = windows if windows is not None else MemoryWindows()

    async def check(
        self, inbound: Inbound, session_key: str, *, is_owner: bool, scheduled: bool = False
    ) -> Limited | None:
        """None when the message may be queued (and then it counts); Limited otherwise.
        `scheduled`: a job's due run (the owner's spend stays exempt, but a job in a sub
        scope meets that chat's limits)."""
        settings = self._limits()
        owner_exempt = is_owner and settings.owner_exempt
        if owner_exempt and (not scheduled or scope_of(session_key) is Scope.MAIN):
            return None
        now = self._clock()
        buckets = [] if owner_exempt else [_Bucket(inbound.identity, settings.user, False)]
        group = group_of(session_key) if inbound.chat_kind != "private" else None
        if group is not None:
            buckets.append(_Bucket(group, settings.group, True))
        counted = [(b.key, b.limits.messages_per_minute) for b in buckets if b.limits.messages_per_minute]
        full = dict(zip([key for key, _ in counted], await self._windows.windows_full(counted, now), strict=True))
        for bucket in buckets:
            hit = await self._over(bucket, now, full.get(bucket.key))
            if hit is not None:
                return await self._refuse(inbound, session_key, bucket, *hit, now)
        if counted:
            # Checked again as it is counted: a message admitted meanwhile (here or on another
            # replica) may have taken the window's last place.
            full = await self._windows.admit_messages(counted, now)
            if full is not None:
                bucket = next(b for b in buckets if b.key == full[0])
                limit = bucket.limits.messages_per_minute
                return await self._refuse(inbound, session_key, bucket, "messages_per_minute", limit, full[1], now)
        return None

    async def spent(
        self, requester: str, session_key: str, *, is_owner: bool, scheduled: bool = False
    ) -> str | None:
        """Between a run's turns: what to tell the user when the person who asked, or the
        group the run counts against, has reached today's token budget; else None. The
        owner is exempt as in `check`: everywhere but in a scheduled run in a sub scope,
        which meets that chat's budget (never the owner's own)."""
        settings = self._limits()
        owner_exempt = is_owner and settings.owner_exempt
        if owner_exempt and (not scheduled or scope_of(session_key) is Scope.MAIN):
            return None
        buckets = [_Bucket(requester, settings.user, False)] if requester and not owner_exempt else []
        group = group_of(session_key)
        if group is not None:
            buckets.append(_Bucket(group, settings.group, True))
        buckets = [b for b in buckets if b.limits.daily_tokens]
        if not buckets:
            return None
        now = self._clock()
        midnight, tomorrow = self._day(now)
        # Both buckets in one read: this runs before every model call.
        spent = await self._usage.tokens_charged(midnight, [b.charge for b in buckets])
        for bucket, tokens in zip(buckets, spent, strict=True):
            if tokens >= bucket.limits.daily_tokens:
                who = "this group has" if bucket.is_group else "you've"
                return (
                    f"(Stopped: {who} used today's budget of {bucket.limits.daily_tokens:,} tokens; "
                    f"try again at {self._clock_time(tomorrow, now)}.)"
                )
        return None

    async def _over(
        self, bucket: _Bucket, now: datetime, free_at: datetime | None
    ) -> tuple[LimitName, int, datetime] | None:
        """The first limit the bucket is over, in order; `free_at`: when its message window
        (read for every bucket at once) frees a place, None when it has room."""
        limits = bucket.limits
        if free_at is not None:
            return "messages_per_minute", limits.messages_per_minute, free_at
        if limits.runs_per_hour:
            starts = await bucket.run_starts(self._usage, now - HOUR)
            if len(starts) >= limits.runs_per_hour:
                return "runs_per_hour", limits.runs_per_hour, starts[-limits.runs_per_hour] + HOUR
        return await self._over_day(bucket, now)

    async def _over_day(self, bucket: _Bucket, now: datetime) -> tuple[LimitName, int, datetime] | None:
        if not bucket.limits.daily_tokens:
            return None
        midnight, tomorrow = self._day(now)
        if await bucket.tokens(self._usage, midnight) >= bucket.limits.daily_tokens:
            return "daily_tokens", bucket.limits.daily_tokens, tomorrow
        return None

    async def _refuse(
        self, inbound: Inbound, session_key: str, bucket: _Bucket, limit: LimitName, value: int,
        retry_at: datetime, now: datetime,
    ) -> Limited:
        if not await self._windows.first_refusal(bucket.key, limit, retry_at, now):
            return Limited(limit, bucket.key, retry_at, None)
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

    @property
    def zone(self) -> tzinfo | None:
        """Whose midnight starts a day (ROOST_TIMEZONE; None: the machine's)."""
        return self._tz

class RunBudget:
    """The loop's between-turns hook (`AgentLoop(between_turns=…)`): stores what the run has
    spent so far, then asks the limiter whether its user or group is over today's budget."""

    def __init__(self, limiter: RateLimiter, notes: UsageNotes, is_owner: Callable[[str], bool]) -> None:
        self._limiter = limiter
        self._notes = notes
        self._is_owner = is_owner

    async def __call__(self, request: RunRequest, turns: int, usage: Usage) -> str | None:
        if usage != Usage():  # before the first call nothing was spent: nothing to store
            await self._notes.note_usage(request.run_id, turns, usage)
        charged = request.account or request.session_key
        return await self._limiter.spent(
            request.requester, charged, is_owner=self._is_owner(request.requester), scheduled=request.scheduled
        )
