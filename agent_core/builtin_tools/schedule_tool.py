"""The `schedule` tool (WRITE): reminders, interval and cron jobs bound to this session.

The tool only validates the shape of a request; the `JobBook` behind it (implemented by
bot.scheduling) owns time zones, calendar rules and storage. A schedule it cannot use comes
back as a ToolError the model can read and correct ("cron has 6 fields; use 5 …").
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field, model_validator

from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError

Action = Literal["create", "list", "pause", "resume", "cancel"]


class ScheduleInput(BaseModel):
    action: Action = Field(description="create a job, list this chat's jobs, or pause/resume/cancel one by id")
    name: str | None = Field(None, max_length=120, description="create: a short name shown with each run")
    prompt: str | None = Field(
        None, max_length=4000, description="create: what to do when the job runs, written as a request to yourself"
    )
    at: str | None = Field(None, description="create, one-off: local date and time, e.g. '2026-11-24 09:00'")
    delay_minutes: float | None = Field(None, description="create, one-off: run this many minutes from now")
    every_minutes: float | None = Field(None, description="create, recurring: run every N minutes (>= 1)")
    cron: str | None = Field(
        None, description="create, recurring: 5-field cron 'minute hour day month weekday', e.g. '0 9 * * 1-5'"
    )
    isolated: bool = Field(
        False,
        description="create: run each time in a fresh session of its own, without this chat's history "
        "(the answer is still posted here); for self-contained tasks like reports",
    )
    job_id: str | None = Field(None, max_length=16, description="pause/resume/cancel: the job's id from list")

    @model_validator(mode="after")
    def _complete(self) -> ScheduleInput:
        if self.action == "create":
            given = [k for k in ("at", "delay_minutes", "every_minutes", "cron") if getattr(self, k) is not None]
            if len(given) != 1:
                raise ValueError("create needs exactly one of at, delay_minutes, every_minutes, cron")
            if not (self.prompt or "").strip():
                raise ValueError("create needs a prompt: what to do when the job runs")
        elif self.isolated:
            raise ValueError("isolated applies only to create")
        if self.action in ("pause", "resume", "cancel") and not self.job_id:
            raise ValueError(f"{self.action} needs the job_id (see action=list)")
        return self


class InvalidJob(Exception):
    """Raised by a JobBook for a request it refuses; the message goes to the model."""


class JobBook(Protocol):
    """Creates and manages the jobs of the session a tool call runs in. Raises InvalidJob
    (or ValueError) with a readable message for anything it refuses."""

    async def create(self, ctx: ToolContext, request: ScheduleInput) -> str: ...

    async def list(self, ctx: ToolContext) -> str: ...

    async def change(self, ctx: ToolContext, action: Action, job_id: str) -> str: ...


def make_schedule_tool(book: JobBook) -> Tool[ScheduleInput]:
    async def run(args: ScheduleInput, ctx: ToolContext) -> str:
        try:
            if args.action == "create":
                return await book.create(ctx, args)
            if args.action == "list":
                return await book.list(ctx)
            assert args.job_id is not None
            return await book.change(ctx, args.action, args.job_id)
        except (InvalidJob, ValueError) as exc:
            raise ToolError(f"schedule not changed: {exc}") from exc

    return Tool(
        "schedule",
        "Schedule work in this chat: a one-off reminder (at a local time or after a delay), or a "
        "recurring job (every N minutes, or a 5-field cron in the owner's time zone). When due, "
        "the prompt runs as a turn in this chat (or, isolated, in a fresh session of its own) and "
        "the answer is posted here. Also list, pause, "
        "resume and cancel this chat's jobs.",
        ScheduleInput,
        Risk.WRITE,
        run,
        describe_action=lambda a: f"schedule {a.action}: {a.model_dump_json(exclude_none=True, indent=2)}",
    )
