"""The heartbeat: every N minutes, within active hours, the main session reads HEARTBEAT.md
and acts on it; an answer of only `HEARTBEAT_OK` means "nothing to report" and is not sent.

No tasks in HEARTBEAT.md (only headings, comments, blank lines) → no run at all, so an idle
heartbeat costs no tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_core.failover import without_fallback_note

OK = "HEARTBEAT_OK"
FILE = "HEARTBEAT.md"
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_TASK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_HOURS = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class HeartbeatSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    every: int = Field(30, ge=0, description="minutes between heartbeats; 0 turns it off")
    active_hours: str | None = None
    """"08:00-22:00" in ROOST_TIMEZONE (a window past midnight like "22:00-06:00" works too)."""

    @field_validator("active_hours")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            ActiveHours.parse(value)
            return value.strip()
        return None


@dataclass(frozen=True, slots=True)
class ActiveHours:
    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> ActiveHours:
        match = _HOURS.match(text)
        if match is None:
            raise ValueError(f"active hours {text!r}: use HH:MM-HH:MM, e.g. 08:00-22:00")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        if h2 == 24 and m2 == 0:
            h2, m2 = 23, 59
        try:
            return cls(time(h1, m1), time(h2, m2))
        except ValueError as exc:
            raise ValueError(f"active hours {text!r}: {exc}") from None

    def contains(self, local: datetime) -> bool:
        now = local.time().replace(tzinfo=None)
        if self.start <= self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end  # the window crosses midnight


def tasks(text: str) -> list[str]:
    """The list items of HEARTBEAT.md outside comments: what the heartbeat should check."""
    return [line.strip() for line in _COMMENT.sub("", text).splitlines() if _TASK.match(line)]


def read_tasks(workspace: Path) -> str | None:
    """HEARTBEAT.md's text when it lists at least one task, else None."""
    try:
        text = (workspace / FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    return text if tasks(text) else None


def prompt(text: str) -> str:
    return (
        "[Heartbeat] A periodic check. Go through the tasks in HEARTBEAT.md below and act on "
        f"those that are due. If nothing needs the owner's attention, reply exactly {OK} and "
        "nothing else.\n\n" + _COMMENT.sub("", text).strip()
    )


def is_silent(answer: str) -> bool:
    """An answer that only says all is well (the token, maybe with punctuation/whitespace)."""
    return without_fallback_note(answer).strip().strip(".!*`_ ").strip() == OK
