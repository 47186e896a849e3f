"""Tool status lines shown under a streaming reply ("⚙️ exec: ls -la", "✓ exec (0.4 s)"), and
"💭 thinking…" while the model thinks."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    PlanProgress,
    QuestionAsked,
    ThinkingChanged,
    ToolFinished,
    ToolStarted,
    WorkersChanged,
)

MAX_DETAIL = 60
THINKING_LINE = "💭 thinking…"
_MD_SPECIAL = re.compile(r"([\\`*_~|>#\[\]()])")
# Input keys that usually hold the gist of a call, in preference order.
_GIST_KEYS = ("command", "cmd", "query", "path", "url", "file", "name", "text")

ToolState = Literal["running", "waiting", "ok", "error"]


def _one_line(text: str, limit: int = MAX_DETAIL) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def tool_gist(tool_input: Mapping[str, Any]) -> str:
    """A short, single-line description of a tool call's input."""
    for key in _GIST_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    for value in tool_input.values():
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    return ""


def short_error(output: str) -> str:
    """The first non-empty line of a tool's error output, shortened."""
    for line in output.splitlines():
        if line.strip():
            return _one_line(line)
    return "failed"


@dataclass(slots=True)
class ToolStatus:
    """The visible state of one tool call."""

    name: str
    gist: str = ""
    state: ToolState = "running"
    duration_s: float = 0.0
    error: str = ""

    def line(self) -> str:
        if self.state == "running":
            return f"⚙️ {self.name}: {self.gist}" if self.gist else f"⚙️ {self.name}"
        if self.state == "waiting":
            return f"⏸ {self.name}: waiting for approval"
        if self.state == "ok":
            return f"✓ {self.name} ({self.duration_s:.1f} s)"
        return f"✗ {self.name}: {self.error or 'failed'}"


def status_block(statuses: Iterable[ToolStatus], max_lines: int) -> list[str]:
    """Lines to show, newest last: at most `max_lines`, older ones summarized."""
    lines = [s.line() for s in statuses]
    if len(lines) <= max_lines:
        return lines
    hidden = len(lines) - (max_lines - 1)
    return [f"… {hidden} earlier steps", *lines[-(max_lines - 1) :]]


def escape_markdown(text: str) -> str:
    """Backslash-escape Markdown syntax so a status line shows literally on Discord."""
    return _MD_SPECIAL.sub(r"\\\1", text)


class ToolBoard:
    """The status of every tool call of one run, fed with the run's events."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolStatus] = {}
        self._approvals: dict[str, str] = {}  # approval id → call id
        self._plan = ""  # "step 2/4: restart web (done when: status is active)"
        self._workers = ""  # "2 workers running"
        self._thinking = ""  # "💭 thinking…" while the model thinks (its reasoning is never shown)

    def apply(self, event: Event) -> bool:
        """Update from a tool or approval event; False for events it does not track."""
        match event:
            case ToolStarted(call_id=cid, name=name, input=tool_input):
                self._tools[cid] = ToolStatus(name, tool_gist(tool_input))
            case ToolFinished(call_id=cid, name=name, is_error=err, output=out, duration_s=dur):
                status = self._tools.setdefault(cid, ToolStatus(name))
                status.state, status.duration_s = ("error" if err else "ok"), dur
                status.error = short_error(out) if err else ""
            case ApprovalRequested(approval_id=aid, call_id=cid, tool_name=name):
                self._approvals[aid] = cid
                self._tools.setdefault(cid, ToolStatus(name)).state = "waiting"
            case PlanProgress():
                self._plan = f"📋 {event.line()}"
            case ThinkingChanged(active=active):
                self._thinking = THINKING_LINE if active else ""
            case WorkersChanged(running=running, finished=finished):
                self._workers = (f"👷 {running} worker{'s' if running != 1 else ''} running" if running
                                 else f"👷 {finished} worker{'s' if finished != 1 else ''} done")  # fmt: skip
            case QuestionAsked():
                return False  # the question is its own message; the ask_user line says it waits
            case ApprovalResolved(approval_id=aid, decision=decision):
                status = self._tools.get(self._approvals.get(aid, ""))
                if status is None or status.state != "waiting":
                    return False
                granted = decision in ("once", "always")
                status.state = "running" if granted else "error"
                status.error = "" if granted else f"not approved ({decision})"
            case _:
                return False
        return True

    def lines(self, max_lines: int, markdown: bool = False) -> list[str]:
        """Status lines, newest last; escaped for a Markdown platform if `markdown`."""
        pinned = [line for line in (self._plan, self._workers, self._thinking) if line]
        lines = pinned + status_block(self._tools.values(), max(1, max_lines - len(pinned)))
        return [escape_markdown(line) for line in lines] if markdown else lines
