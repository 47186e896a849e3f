"""Jobs in the chat: `/jobs` (one card per job, with Run now / Pause / Cancel buttons) and the
button presses. Buttons carry `job:<op>:<id>` (≤ 64 bytes, an opaque id); only an owner's
press changes anything, wherever the card is shown."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.base import Button, ButtonAnswer
from agent_core.inbound import Inbound, ReplyTarget
from bot.operations.actor import chat_actor
from bot.router import Accept
from bot.scheduling.book import describe
from bot.storage.jobs import JobRow

if TYPE_CHECKING:
    from bot.registry import ChatHost

log = logging.getLogger(__name__)

PREFIX = "job:"
OPS = ("run", "pause", "resume", "cancel")
NOT_YOURS = "Only my owner can manage scheduled jobs."


def buttons(job: JobRow) -> list[Button]:
    toggle = Button("▶ Resume", f"{PREFIX}resume:{job.id}") if job.state == "paused" else (
        Button("⏸ Pause", f"{PREFIX}pause:{job.id}")
    )
    row = [Button("▶ Run now", f"{PREFIX}run:{job.id}")]
    if job.state in ("active", "paused"):
        row.append(toggle)
    row.append(Button("✖ Cancel", f"{PREFIX}cancel:{job.id}"))
    return row


async def jobs_command(c: ChatHost, inbound: Inbound, route: Accept) -> str:
    """The session's jobs (the owner's private chat: every job), one card each."""
    if c.jobs is None:
        return "Scheduled jobs are not running in this process."
    everything = route.is_owner and inbound.chat_kind == "private"
    actor = chat_actor(inbound.identity, is_owner=route.is_owner)
    if everything:
        jobs = await c.operations.jobs(actor)
    else:  # the session's members may list its jobs; only an owner's press changes one
        jobs = await c.operations.session_jobs(actor, route.session_key)
    if not jobs:
        return "No scheduled jobs here. Ask me, e.g. “remind me in 20 minutes to stretch”."
    adapter = c.adapters[inbound.platform]
    target = ReplyTarget(inbound.platform, inbound.chat_id, inbound.thread_id)
    now = c.jobs.scheduler.clock()
    for job in jobs:
        where = "" if job.session_key == route.session_key else f"\nin: {job.session_key}"
        owner_buttons = buttons(job) if route.is_owner else []
        await adapter.send_text(target, describe(job, now) + where, buttons=owner_buttons)
    return f"{len(jobs)} scheduled job{'s' if len(jobs) != 1 else ''} (times in {c.jobs.scheduler.timezone})."


async def press(c: ChatHost, action: str, identity: str) -> ButtonAnswer:
    op, _, job_id = action[len(PREFIX) :].partition(":")
    if c.jobs is None or op not in OPS or not job_id:
        return ButtonAnswer("This button is no longer active.", done=False)
    if not c.router.is_owner_identity(identity):
        log.info("job.button_refused", extra={"identity": identity, "job": job_id})
        return ButtonAnswer(NOT_YOURS, done=False)
    _, answer = await c.operations.operate_job(chat_actor(identity, is_owner=True), op, job_id)  # type: ignore[arg-type]
    return ButtonAnswer(answer, done=True)
