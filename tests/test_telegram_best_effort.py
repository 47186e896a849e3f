"""Best-effort requests never take a slot a message needs: the typing indicator (in a group,
PTB's limiter) and the "⏳ Got it" notice (in a burst). PTB over HTTP against the fake Bot API,
the real app behind it."""

from __future__ import annotations

import asyncio
import statistics
import time

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, OWNER, running, tg  # noqa: F401  (fixture)

EXCHANGES = 12
"""Replies in one group: with their typing actions 24 requests, past the 20 that PTB's
per-group limiter lets through at once (then one every 3 s); the messages alone are 12."""


async def test_typing_never_takes_a_slot_of_a_groups_twenty_a_minute(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        asked: list[float] = []
        for i in range(EXCHANGES):
            asked.append(time.monotonic())
            tg.send_group(GROUP, MEMBER, f"ping {i}", mention=True, first_name="Bob")
            await tg.await_for(lambda n=i + 1: len(tg.bot_messages(GROUP)) == n, timeout=30)
        await h.app.conversations.lanes.drain()
    typing = [c for c in tg.calls_of("sendChatAction") if c.params.get("chat_id") == GROUP]
    sends = [c for c in tg.calls_of("sendMessage") if c.params.get("chat_id") == GROUP and c.ok]
    # A send that waited for a slot the indicator took waits about 3 s inside PTB; an answer
    # with nothing to wait for goes out in tens of milliseconds.
    waits = [send.at - at for send, at in zip(sends, asked, strict=True)]
    assert max(waits) < 2.0, [round(w, 2) for w in waits]
    assert len(typing) >= EXCHANGES  # and every reply showed the indicator first


BURST = 14


async def test_in_a_burst_the_got_it_notice_never_takes_an_answers_slot(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A user writing twice a second, faster than Telegram's one message a second per chat:
    replies are paced, one per interval, and a "⏳ Got it" notice never goes in a slot an
    answer was waiting for (that made every answer wait two intervals)."""
    async with running(tmp_path, tg, fake_api, agent={"queue_mode": "followup"}) as h:
        for i in range(BURST):
            tg.send_private(OWNER, f"quick {i}")
            await asyncio.sleep(0.5)  # timing-ok: the offered load (two messages a second)
        await h.bot_text(OWNER, lambda t: t == f"echo: quick {BURST - 1}", timeout=60)
        await h.app.conversations.lanes.drain()
    sends = [c for c in tg.calls_of("sendMessage") if c.params.get("chat_id") == OWNER and c.ok]
    answers = [c for c in sends if str(c.params.get("text", "")).startswith("echo: ")]
    assert [c.params["text"] for c in answers] == [f"echo: quick {i}" for i in range(BURST)]
    # Past the chat's burst, an answer goes every interval (1.05 s); a notice in between
    # would make it two.
    gaps = [b.at - a.at for a, b in zip(answers, answers[1:])]
    assert statistics.median(gaps[3:]) < 1.6, [round(g, 2) for g in gaps]
