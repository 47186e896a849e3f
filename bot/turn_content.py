"""A batch of lane items → the user content of its run: the parts of an album still arriving
gathered in, attachments turned into blocks (a voice note that could not be transcribed set
aside, its sender told), and in a group the recent messages not addressed to Roost framed as
context only."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.base import Adapter
from agent_core.inbound import Inbound
from agent_core.prompt import frame_untrusted
from agent_core.risk import Scope
from bot import queue_modes
from bot.lanes import Lanes
from bot.pending import Pending

if TYPE_CHECKING:
    from bot.media import MediaIntake
    from bot.storage import Storage

ALBUM_SETTLE_S = 1.0
"""How long a run waits for more parts of an album (Telegram sends each as its own update,
normally in the same batch) after the last one arrived."""


@dataclass(frozen=True, slots=True)
class WithMedia(Pending):
    """A message whose attachments were fetched: its blocks go before its text."""

    media_blocks: tuple[dict[str, Any], ...] = ()


async def gather_album(lanes: Lanes[Pending], key: str, items: list[Pending], settle_s: float) -> list[Pending]:
    """The parts of an album still arriving join the run of its first part: wait until
    none came for `settle_s` (parts queued behind a run are in `items` already)."""
    albums = {p.inbound.album_id for p in items if p.inbound.album_id is not None}
    if not albums:
        return items
    items = list(items)
    while True:
        await asyncio.sleep(settle_s)
        more = lanes.take_queued(key, lambda p: p.job is None and p.inbound.album_id in albums)
        if not more:
            return items
        items.extend(more)


async def with_media(
    media: MediaIntake | None, adapters: Mapping[str, Adapter], notify: Callable[[Inbound, str], Awaitable[None]],
    key: str, scope: Scope, items: list[Pending],
) -> tuple[list[Pending], list[Pending]]:  # fmt: skip
    """Each message with attachments becomes its blocks and its new text (bot.media).
    Returns (ready, waiting): waiting are the messages whose voice note could not be
    transcribed, as they came (their sender is told)."""
    from bot.media import VoicePending

    assert media is not None
    images = [0]
    out: list[Pending] = []
    waiting: list[Pending] = []
    for item in items:
        inbound = item.inbound
        if not inbound.attachments:
            out.append(item)
            continue

        async def told(text: str, inbound: Inbound = inbound) -> None:
            await notify(inbound, text)

        try:
            prepared = await media.prepare(adapters.get(inbound.platform), key, scope, inbound, images, told)
        except VoicePending as exc:
            waiting.append(item)
            await notify(inbound, exc.notice)
            continue
        out.append(WithMedia(dataclasses.replace(inbound, text=prepared.text), item.route, item.inbox_id,
                             item.job, tuple(prepared.blocks)))
    return out, waiting


async def turn_content(storage: Storage, key: str, scope: Scope, items: list[Pending]) -> list[dict[str, Any]]:
    """The run's user content; empty when nothing is left to answer."""
    blocks: list[dict[str, Any]] = []
    if key.startswith("group:"):
        recent = await storage.recent_group_messages(key)
        if recent:
            lines = "\n".join(f"{m.sender}: {m.text}" for m in recent)
            blocks.append(
                {
                    "type": "text",
                    "text": "Recent messages in this chat, not addressed to you "
                    f"(context only):\n{frame_untrusted(lines, 'group messages')}",
                }
            )
            await storage.clear_group_messages(key)
    for item in items:
        blocks.extend(getattr(item, "media_blocks", ()))
        if item.inbound.text.strip():
            blocks.append(queue_modes.content_block(item, scope))
    if not any(b.get("type") != "text" for b in blocks) and not any(p.inbound.text.strip() for p in items):
        return []
    return blocks
