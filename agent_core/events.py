"""Typed events a run yields; the only thing adapters need to render a reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agent_core.risk import Risk


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    web_search_requests: int = 0
    """Searches the web search server tool made (agent_core.web_search)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.web_search_requests + other.web_search_requests,
        )


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    session_key: str
    type: Literal["run_started"] = "run_started"


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The model finished one message; text after this belongs to a new paragraph."""

    turn: int
    type: Literal["turn_ended"] = "turn_ended"


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    name: str
    input: dict[str, Any]
    risk: Risk
    type: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    is_error: bool
    output: str
    duration_s: float
    type: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    approval_id: str
    call_id: str
    tool_name: str
    risk: Risk
    action: str
    """The full action (e.g. the whole shell command), never truncated."""
    expires_at: datetime
    type: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    approval_id: str
    decision: Literal["once", "always", "deny", "expired", "cancelled"]
    resolved_by: str | None
    via: str | None = None
    """Where the decision was made when not on the card itself (e.g. "dashboard")."""
    type: Literal["approval_resolved"] = "approval_resolved"


@dataclass(frozen=True, slots=True)
class RunFinished:
    run_id: str
    stop_reason: str
    """end_turn, max_turns, loop_detected, cancelled, ..."""
    turns: int
    usage: Usage
    text: str
    """The whole visible answer of the run (all turns), as streamed."""
    model: str = ""
    type: Literal["run_finished"] = "run_finished"


@dataclass(frozen=True, slots=True)
class RunFailed:
    run_id: str
    message: str
    """Shown to the user as is: it must be clear and contain no secrets."""
    kind: str = "error"
    usage: Usage = field(default_factory=Usage)
    type: Literal["run_failed"] = "run_failed"


@dataclass(frozen=True, slots=True)
class PlanProgress:
    """The session's plan changed: shown as one status line ("step 2/4: restart web (done
    when: status is active)")."""

    plan_id: str
    step: int
    """1-based index of the current step (== total when the plan is complete)."""
    total: int
    title: str
    done_when: str
    state: Literal["active", "done", "aborted", "failed"] = "active"
    type: Literal["plan_progress"] = "plan_progress"

    def line(self) -> str:
        if self.state == "done":
            return f"✓ plan done ({self.total}/{self.total})"
        if self.state in ("aborted", "failed"):
            return f"✗ plan {self.state} at step {self.step}/{self.total}: {self.title}"
        return f"step {self.step}/{self.total}: {self.title} (done when: {self.done_when})"


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    """The run paused on `ask_user`; the question itself is delivered to the chat."""

    question_id: str
    text: str
    options: tuple[str, ...] = ()
    type: Literal["question_asked"] = "question_asked"


@dataclass(frozen=True, slots=True)
class WorkersChanged:
    """Workers of this run started or finished ("2 workers running")."""

    running: int
    finished: int
    type: Literal["workers_changed"] = "workers_changed"


@dataclass(frozen=True, slots=True)
class ThinkingChanged:
    """The model started (`active`) or stopped thinking. Chats show a "💭 thinking…" status
    meanwhile; the reasoning itself is never part of the answer."""

    active: bool
    type: Literal["thinking_changed"] = "thinking_changed"


Event = (
    RunStarted
    | TextDelta
    | ThinkingChanged
    | TurnEnded
    | ToolStarted
    | ToolFinished
    | ApprovalRequested
    | ApprovalResolved
    | RunFinished
    | RunFailed
    | PlanProgress
    | QuestionAsked
    | WorkersChanged
)
