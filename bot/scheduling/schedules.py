"""A job's schedule as text (kind + spec + IANA zone) ↔ an APScheduler trigger.

The calendar arithmetic is APScheduler's (`CronTrigger` matches the cron fields,
`IntervalTrigger` counts real time); this module parses what the model asked for, refuses
what cannot work (with a message the model can act on), computes the misfire grace time, and
decides what a wall-clock time means when daylight saving repeats or skips it:

- a cron's due times are wall-clock times, each fired once: CronTrigger matches them on the
  wall clock (read as UTC, a zone where every time exists once) and zoneinfo gives the
  instant — the first occurrence of a time the fall-back hour repeats (01:30 EDT, never
  01:30 EST as well), the end of the gap for a time spring-forward skips (02:30 runs once, at
  03:00 EDT). APScheduler alone fires a repeated time twice and moves a skipped one by the
  gap's length (03:30), so the next due time is always taken from here;
- an interval is real elapsed time, DST or not; a one-off's local time reads as a cron's;
- the grace is real elapsed time: half the shortest interval between runs on an ordinary day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

Kind = Literal["once", "interval", "cron"]

ONE_OFF_GRACE = timedelta(hours=24)
MAX_GRACE = timedelta(hours=1)
MIN_INTERVAL = timedelta(minutes=1)
GRACE_SAMPLE = 6
"""Upcoming runs whose spacing decides a cron's grace: one DST change spoils at most one gap."""


class InvalidSchedule(ValueError):
    """The schedule cannot be used; the message says why in words the model can act on."""


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: Kind
    spec: str
    """once: the UTC ISO time; interval: seconds; cron: the 5-field expression."""
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    def trigger(self, anchor: datetime | None = None) -> BaseTrigger:
        tz = self.zone
        match self.kind:
            case "once":
                return DateTrigger(datetime.fromisoformat(self.spec), timezone=tz)
            case "interval":
                return IntervalTrigger(seconds=int(self.spec), start_date=anchor, timezone=tz)
            case _:
                return CronTrigger.from_crontab(self.spec, timezone=tz)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The first due time strictly after `after` (None: never again), in UTC."""
        if self.kind == "once":
            at = datetime.fromisoformat(self.spec)
            return at if at > after else None
        if self.kind == "cron":
            return _next_wall_time(CronTrigger.from_crontab(self.spec, timezone=UTC), self.zone, after)
        # get_next_fire_time returns a time >= now; nudge past `after` itself.
        nxt = self.trigger(anchor).get_next_fire_time(None, after + timedelta(microseconds=1))
        return None if nxt is None else nxt.astimezone(UTC)

    def grace(self, now: datetime) -> timedelta:
        """How late a run may start and still run, in real time: one-offs 24 h; recurring
        jobs half the interval, at most an hour. A cron's interval is the shortest between its
        next runs, leaving out any a DST change stretches or shrinks (a pair of runs either
        side of a change in UTC offset), so a job made near a change gets the same grace."""
        if self.kind == "once":
            return ONE_OFF_GRACE
        if self.kind == "interval":
            return min(timedelta(seconds=int(self.spec)) / 2, MAX_GRACE)
        runs: list[datetime] = []
        at: datetime | None = now
        while len(runs) < GRACE_SAMPLE and (at := self.next_after(at)) is not None:
            runs.append(at)
        tz = self.zone
        gaps = [b - a for a, b in zip(runs, runs[1:]) if a.astimezone(tz).utcoffset() == b.astimezone(tz).utcoffset()]
        return min(min(gaps) / 2, MAX_GRACE) if gaps else MAX_GRACE

    def describe(self) -> str:
        match self.kind:
            case "once":
                local = datetime.fromisoformat(self.spec).astimezone(self.zone)
                return f"once at {local:%Y-%m-%d %H:%M} ({self.timezone})"
            case "interval":
                return f"every {_duration(int(self.spec))}"
            case _:
                return f"cron '{self.spec}' ({self.timezone})"


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown time zone {name!r}; use an IANA name like Europe/Berlin") from exc


def wall_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """When the clocks in `tz` show the naive `wall`, in UTC: its first occurrence if the
    fall-back hour shows it twice, the end of the gap if spring-forward skips it."""
    first = wall.replace(tzinfo=tz, fold=0)  # PEP 495: fold=0 is the earlier of two readings
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return first.astimezone(UTC)
    # In a gap fold=1 reads `wall` with the offset after the change (an instant before it) and
    # fold=0 with the one before (an instant after it): the change is the first second between
    # them that has the later offset. zoneinfo has no API for its transitions; bisect.
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = int(first.timestamp())
    later = datetime.fromtimestamp(hi, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == later:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def _next_wall_time(trigger: CronTrigger, tz: ZoneInfo, after: datetime) -> datetime | None:
    """The first wall-clock due time of `trigger` (a cron matched in UTC, i.e. on the bare
    wall clock) whose instant in `tz` is after `after`. In the repeated hour the wall clock
    reads times it has shown before: those already had their (first) occurrence; skip them."""
    wall = after.astimezone(tz).replace(tzinfo=UTC)
    while (nxt := trigger.get_next_fire_time(None, wall + timedelta(microseconds=1))) is not None:
        at = wall_instant(nxt.replace(tzinfo=None), tz)
        if at > after:
            return at
        wall = nxt
    return None


def one_off(now: datetime, tz: str, *, at: str | None = None, delay_minutes: float | None = None) -> Schedule:
    """A single run at a local wall-clock time ("2026-11-24 09:00") or after a delay."""
    if delay_minutes is not None:
        if delay_minutes <= 0:
            raise InvalidSchedule("the delay must be positive (minutes from now)")
        when = now + timedelta(minutes=delay_minutes)
    else:
        assert at is not None
        try:
            local = datetime.fromisoformat(at.strip().replace("T", " "))
        except ValueError as exc:
            raise InvalidSchedule(
                f"cannot read the time {at!r}; give a local time like '2026-11-24 09:00'"
            ) from exc
        when = wall_instant(local, zone(tz)) if local.tzinfo is None else local.astimezone(UTC)
        if when <= now:
            shown = when.astimezone(zone(tz))
            raise InvalidSchedule(
                f"{shown:%Y-%m-%d %H:%M} ({tz}) is in the past; it is now "
                f"{now.astimezone(zone(tz)):%Y-%m-%d %H:%M}. Pick a future time."
            )
    return Schedule("once", when.astimezone(UTC).isoformat(), tz)


def interval(every_minutes: float, tz: str) -> Schedule:
    seconds = round(every_minutes * 60)
    if timedelta(seconds=seconds) < MIN_INTERVAL:
        raise InvalidSchedule("the interval must be at least 1 minute")
    return Schedule("interval", str(seconds), tz)


def cron(expression: str, tz: str) -> Schedule:
    expression = " ".join(expression.split())
    fields = len(expression.split(" ")) if expression else 0
    if fields != 5:
        raise InvalidSchedule(
            f"cron {expression!r} has {fields} field(s); use exactly 5: minute hour day-of-month "
            "month day-of-week, e.g. '0 9 * * 1-5' for weekdays at 09:00 (no seconds field)"
        )
    try:
        CronTrigger.from_crontab(expression, timezone=zone(tz))
    except ValueError as exc:
        raise InvalidSchedule(f"cron {expression!r} is not valid: {exc}") from exc
    return Schedule("cron", expression, tz)


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    if seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds} s"
