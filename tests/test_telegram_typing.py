"""The typing indicator is best-effort: it never takes a slot a message needs. PTB over HTTP
against the fake Bot API, the real app behind it."""

from __future__ import annotations

import time

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, running, tg  # noqa: F401  (fixture)

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
