"""Resume after a crash: each run a crash cut off gets one message in its chat offering to
continue, with a Continue button that resumes from the stored transcript.

The offer is claimed in `notices_sent` before it is sent, so however often the process
restarts it is sent at most once (a crash between the claim and the send loses that offer;
typing "continue" still works). Pressing Continue is an ordinary message "continue" from
the presser, stored through the inbox with the update id `resume:<run id>`: a second press
is a redelivery and is ignored, and the run it starts sees the interrupted run's transcript,
already made valid at start-up. It continues in the session of the interrupted run: for
an isolated job (`<chat key>:job-<id>`) that is the job's own, not the chat it answers in.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from adapters.base import Button, ButtonAnswer
from agent_core.inbound import Inbound, ReplyTarget
from bot.router import Accept
from bot.scheduling.refs import job_ref
from bot.session_keys import origin_of, scope_of

if TYPE_CHECKING:
    from bot.registry import ChatHost

log = logging.getLogger(__name__)

PREFIX = "resume:"
NOTICE_KIND = "resume"
OFFER_WITHIN = timedelta(days=1)
"""Runs cut off longer ago than this are not offered any more."""
CONTINUE = "continue"
STALE = "This button is no longer active."
REQUEST_CHARS = 200


def offer_text(request: str, workers: list[str] | None = None) -> str:
    short = request if len(request) <= REQUEST_CHARS else request[: REQUEST_CHARS - 1] + "…"
    text = f"I was restarted while working on: {short} — say continue to resume"
    if workers:
        # Workers die with the process; say so rather than let their results vanish silently.
        text += f" (interrupted workers: {', '.join(workers)})"
    return text


async def offer(c: ChatHost, now: datetime | None = None) -> int:
    """At start-up, once adapters are connected: offer each run a crash cut off (and not
    offered before) to continue. Returns how many offers were sent."""
    now = now or datetime.now(UTC)
    sent = 0
    for run in await c.storage.interrupted_runs(now - OFFER_WITHIN):
        rows = await c.storage.inbox_for_run(run.id)
        if not rows:
            continue  # e.g. a terminal's run: no chat to offer it in
        if any((ref := job_ref(r.message.update_id)) is not None and ref.heartbeat for r in rows):
            continue  # the next heartbeat does its work; nobody asked for this one
        message = rows[-1].message
        adapter = c.adapters.get(message.platform)
        if adapter is None:
            continue  # left unclaimed: offered when that platform runs again
        if not await c.storage.claim_notice(NOTICE_KIND, run.id):
            continue
        request = " / ".join(r.message.text for r in rows)
        workers = [f"“{w.name}”" for w in await c.storage.worker_runs(run.id) if w.status == "interrupted"]
        target = ReplyTarget(message.platform, message.chat_id, message.thread_id)
        try:
            await adapter.send_text(target, offer_text(request, workers), buttons=[Button("▶ Continue", PREFIX + run.id)])
            sent += 1
            log.info("resume.offered", extra={"run": run.id, "session": run.session_key})
        except Exception:
            log.warning("resume.offer_failed", extra={"run": run.id}, exc_info=True)
    return sent


async def session_of(c: ChatHost, inbound: Inbound, route: Accept) -> Accept:
    """Where a Continue press goes: the chat routed it (so who may press is the chat's
    decision); an isolated job's run it continues is in the job's own session of that chat."""
    if not (inbound.update_id or "").startswith(PREFIX):
        return route
    run = await c.storage.get_run(inbound.update_id[len(PREFIX) :])  # type: ignore[index]
    if run is None or run.session_key == route.session_key or origin_of(run.session_key) != route.session_key:
        return route
    return Accept(run.session_key, scope_of(run.session_key), route.is_owner)


async def press(c: ChatHost, action: str, identity: str) -> ButtonAnswer:
    """Continue pressed: the presser (an owner, or whoever asked for the cut-off run) says
    "continue" in that chat, exactly once."""
    run_id = action[len(PREFIX) :]
    run = await c.storage.get_run(run_id) if run_id else None
    rows = await c.storage.inbox_for_run(run_id) if run is not None else []
    if run is None or run.status != "interrupted" or not rows:
        return ButtonAnswer(STALE, done=False)
    message = rows[-1].message
    askers = {f"{r.message.platform}:{r.message.sender_id}" for r in rows}
    if not c.router.is_owner_identity(identity) and identity not in askers:
        return ButtonAnswer("Only the person who asked (or my owner) can resume this.", done=False)
    platform, _, sender_id = identity.partition(":")
    if platform != message.platform:
        return ButtonAnswer(STALE, done=False)
    name = next((r.message.sender_name for r in rows if r.message.sender_id == sender_id), sender_id)
    inbound = Inbound(
        platform=message.platform,
        chat_kind="group" if message.chat_kind == "group" else "private",
        chat_id=message.chat_id,
        sender_id=sender_id,
        sender_name=name,
        text=CONTINUE,
        thread_id=message.thread_id,
        mentioned=True,
        update_id=f"{PREFIX}{run_id}",
        received_at=datetime.now(UTC),
    )
    if not await c.receive(inbound):
        return ButtonAnswer("Already resumed.", done=False)
    return ButtonAnswer("▶ Resuming.", done=True)
