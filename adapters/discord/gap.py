"""What a Discord channel received after a cursor, fetched through the REST history
endpoint (GET /channels/{id}/messages?after=…) within `adapters.catch_up.CatchUp`'s bounds.

Contract of `fetch_gap`: the channel's messages newer than both the cursor and `now -
max_age`, oldest first, at most `max_messages` — the newest ones when there were more.
`older` counts the users' (not bots') messages after the cursor that fell outside the
window or beyond that count; `more` says there were more than counted. At most four
history reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import discord
from discord.utils import time_snowflake

from adapters.catch_up import CatchUp


@dataclass(frozen=True, slots=True)
class Gap:
    messages: list[discord.Message]
    older: int
    more: bool


async def fetch_gap(channel: discord.abc.Messageable, cursor: int, now: datetime, bounds: CatchUp) -> Gap:
    cutoff = time_snowflake(now - bounds.max_age, high=True)
    older, more = 0, False
    if cursor < cutoff:  # messages between the cursor and the window are only counted
        stale = [m async for m in channel.history(
            after=discord.Object(cursor), before=discord.Object(cutoff + 1), limit=bounds.max_messages, oldest_first=True,
        )]  # fmt: skip
        older = sum(1 for m in stale if not m.author.bot)
        more = len(stale) >= bounds.max_messages
    start = discord.Object(max(cursor, cutoff))
    page = [m async for m in channel.history(after=start, limit=bounds.max_messages, oldest_first=True)]
    if len(page) >= bounds.max_messages:  # there may be more: answer the newest, count the rest
        newest = [m async for m in channel.history(limit=bounds.max_messages)]
        kept = {m.id for m in newest}
        older += sum(1 for m in page if m.id not in kept and not m.author.bot)
        between = min(kept) > max(m.id for m in page)  # unread messages lie between the two reads
        page = sorted((m for m in newest if m.id > start.id), key=lambda m: m.id)
        more = more or between
    return Gap(page, older, more)
