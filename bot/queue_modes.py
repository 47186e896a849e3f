"""Queue modes in the chat and in a run: `/queue` and the steer hook a run asks at each
tool boundary (the modes themselves live in bot.lanes)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent_core.inbound import Inbound
from agent_core.prompt import ADDRESSED_SOURCE, frame_untrusted
from agent_core.risk import Scope
from bot.commands import Command
from bot.lanes import QUEUE_MODES, QueueMode
from bot.operations.actor import chat_actor
from bot.operations.core import SessionPlace
from bot.router import Accept

if TYPE_CHECKING:
    from bot.pending import Pending
    from bot.registry import ChatHost

DESCRIPTIONS: dict[str, str] = {
    "collect": "messages sent while I work are answered together in my next answer",
    "followup": "messages sent while I work are answered one by one, in order",
    "steer": "messages sent while I work reach me at my next step, in the same answer",
    "interrupt": "a new message stops my current answer and I start on it",
}

BUSY_NOTICE: dict[str, str] = {
    "collect": "⏳ Got it — I'll get to this as soon as I finish the current answer.",
    "followup": "⏳ Got it — I'll get to this as soon as I finish the current answer.",
    "steer": "⏳ Got it — I'll take this into the answer I'm working on.",
    "interrupt": "",
}
"""Told once when a message has to wait (the first one queued behind a run); nothing in
interrupt mode, where the message does not wait (the stopped answer shows it)."""


async def queue_command(c: ChatHost, command: Command, inbound: Inbound, route: Accept) -> str:
    """`/queue` shows the session's mode; `/queue <mode>` sets it (persisted); `/queue
    default` goes back to the configured one. In a group: the owner and the group's admins
    (bot.roles)."""
    key = route.session_key
    arg = command.args.strip().lower()
    if not arg:
        mode = c.lanes.mode_of(key)
        options = "\n".join(f"/queue {m} — {d}" for m, d in DESCRIPTIONS.items())
        return f"Queue mode here: {mode} ({DESCRIPTIONS[mode]}).\n{options}"
    if arg not in (*QUEUE_MODES, "default"):
        return f"Unknown mode {arg!r}. Modes: {', '.join(QUEUE_MODES)} (or default)."
    mode: QueueMode | None = None if arg == "default" else arg  # type: ignore[assignment]
    place = SessionPlace(key, route.scope.value, inbound.platform, inbound.chat_id)
    await c.operations.set_queue_mode(chat_actor(inbound.identity, is_owner=route.is_owner), place, mode)
    c.lanes.set_mode(key, mode)
    if c.elsewhere is not None:  # the replica running this session decides by it too
        await c.elsewhere.mode_changed(key, mode)
    now = c.lanes.mode_of(key)
    return f"Queue mode: {now} — {DESCRIPTIONS[now]}."


def content_block(pending: Pending, scope: Scope) -> dict[str, Any]:
    """A message as the run's content block. In a sub scope it is framed as untrusted with
    its sender inside the frame: nobody there is the owner, and a `</untrusted>` in it must
    not close the frame around the group's other messages."""
    text = pending.inbound.text
    if scope is Scope.SUB:
        text = frame_untrusted(f"[{pending.inbound.sender_name}] {text}", ADDRESSED_SOURCE)
    return {"type": "text", "text": text}


def steer_hook(
    c: ChatHost, key: str, items: list[Pending], run_id: str
) -> Callable[[], Awaitable[list[dict[str, Any]]]]:
    """What the run `run_id` asks at each tool boundary: in steer mode, the messages queued
    meanwhile (jobs stay queued: they run alone). Their inbox rows become this run's, and
    `items` grows, so the run's end marks them done and logs them."""

    async def steer() -> list[dict[str, Any]]:
        if c.lanes.mode_of(key) != "steer":
            return []
        await c.lanes.take_in(key)  # with replicas: what reached the others first, in order
        # A message with files waits for the next run: fetching them, or a transcription that
        # fails, has no place between two tool calls.
        taken = c.lanes.take_queued(key, lambda p: p.job is None and not p.inbound.attachments)
        if not taken:
            return []
        ids = [p.inbox_id for p in taken if p.inbox_id is not None]
        try:
            await asyncio.shield(c.storage.take_inbound(ids, run_id))
        except BaseException:
            # Cancelled (or failed) before they reached the transcript: back to the queue,
            # in front, so nothing is lost and the order holds.
            c.lanes.requeue(key, taken)
            raise
        items.extend(taken)
        scope = items[0].route.scope
        return [content_block(p, scope) for p in taken]

    return steer

