"""A job's schedule as text (kind + spec + IANA zone) ↔ an APScheduler trigger.

The calendar arithmetic — cron fields, intervals, DST gaps and repeats — is APScheduler's
(`CronTrigger`, `IntervalTrigger`, `DateTrigger`); this module only parses what the model
asked for, refuses what cannot work (with a message the model can act on) and computes the
misfire grace time.
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
        """The first fire time strictly after `after` (None: never again), in UTC."""
        trigger = self.trigger(anchor)
        if self.kind == "once":
            at = datetime.fromisoformat(self.spec)
            return at if at > after else None
        # get_next_fire_time returns a time >= now; nudge past `after` itself.
        nxt = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
        return None if nxt is None else nxt.astimezone(UTC)

    def grace(self, now: datetime) -> timedelta:
        """How late a run may start and still run: one-offs 24 h; recurring jobs half the
        interval, at most an hour."""
        if self.kind == "once":
            return ONE_OFF_GRACE
        if self.kind == "interval":
            return min(timedelta(seconds=int(self.spec)) / 2, MAX_GRACE)
        first = self.next_after(now)
        second = self.next_after(first) if first else None
        if first is None or second is None:
            return MAX_GRACE
        return min((second - first) / 2, MAX_GRACE)

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
        when = local.replace(tzinfo=zone(tz)) if local.tzinfo is None else local
        when = when.astimezone(UTC)
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
