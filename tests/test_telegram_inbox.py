"""What arrives through Telegram is kept and kept clean: /stop leaves the queue alone, half
an emoji does not wedge a session, and strangers cannot flood the owner's chat with pairing
notices — PTB over HTTP against the fake Bot API, the real app behind it."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import func, select

from bot.storage.models import SeenUpdateModel
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text, reply_text, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, PAIRING_CODE, Harness, running, tg  # noqa: F401  (fixture)

SLOW_START = "Let me think about this carefully, it will take a while."


def joined_answer(body: dict[str, Any]) -> Reply:
    blocks = user_blocks(body)
    texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return reply_text("answer to " + " | ".join(texts))


async def test_stop_cancels_the_running_answer_and_the_queued_messages_still_get_answered(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text(SLOW_START, chunk_size=60), Stall(60)))
    fake_api.responder = joined_answer
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "first: plan my week")
        await h.says(OWNER, SLOW_START)
        tg.send_private(OWNER, "second: and Monday?")
        await h.bot_text(OWNER, lambda t: t.startswith("⏳ Got it"))
        tg.send_private(OWNER, "third: and Tuesday?")
        tg.send_private(OWNER, "/stop")
        await h.says(OWNER, "Stopped.")
        await h.bot_text(OWNER, lambda t: t.startswith(SLOW_START) and "stopped" in t)
        await h.bot_text(OWNER, lambda t: t.startswith("answer to"))
        await h.app.conversations.lanes.drain()  # the streamed answer is final only now
        (answer,) = [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]
        assert (answer.text or "").endswith("second: and Monday? | third: and Tuesday?")
        assert len(fake_api.requests) == 2
        assert await h.app.storage.inbox_rows({"received", "queued", "running"}) == []


async def test_a_lone_surrogate_in_an_update_does_not_wedge_the_session(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        # Telegram can deliver half an emoji: the JSON carries a lone "\ud83d" escape.
        tg.send_private(OWNER, "half an emoji: \ud83d!", first_name="Oli\udc00via")
        await h.says(OWNER, "echo: half an emoji: \ufffd!")
        tg.send_private(OWNER, "still with me?")
        await h.says(OWNER, "echo: still with me?")
        tg.send_private(OWNER, "and now?")
        await h.says(OWNER, "echo: and now?")
        assert [r.status for r in fake_api.requests] == [200, 200, 200]


async def _all_handled(h: Harness, updates: int, timeout: float = 20.0) -> None:
    """Every update marked seen and no inbox row left: each `receive` ran to its end (the
    notices it sent included)."""

    async def done() -> bool:
        async with h.app.storage.engine.connect() as conn:
            seen = await conn.scalar(select(func.count()).select_from(SeenUpdateModel))
        return seen == updates and not await h.app.storage.inbox_rows()

    async with asyncio.timeout(timeout):
        while not await done():
            await asyncio.sleep(0.02)  # timing-ok: re-check a condition the app writes


async def test_pairing_spam_from_three_strangers_notifies_the_owner_once_per_code(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    strangers = [501, 502, 503]
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        for i in range(10):
            for user in strangers:
                tg.send_private(user, f"let me in #{i}", first_name=f"Spammer{user}")
        await _all_handled(h, updates=30)
        owner_notices = [m.text or "" for m in tg.bot_messages(OWNER) if "asks to talk to me" in (m.text or "")]
        assert len(owner_notices) == 3
        codes = set()
        for user in strangers:
            told = [m.text or "" for m in tg.bot_messages(user)]
            assert len(told) == 1, told  # re-told at most once per PAIRING_RETELL
            code = PAIRING_CODE.search(told[0])
            assert code is not None
            codes.add(code.group())
        assert all(any(code in n for n in owner_notices) for code in codes)
        assert fake_api.requests == []
