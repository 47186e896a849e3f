"""Telegram learns an update was received only after its message is in the inbox: a process
gone before the commit (killed, or its store never finishing) or a store that fails gets the
update again, and it is answered once — in polling (the getUpdates offset) and webhook mode
(the HTTP answer). PTB over HTTP against the fake Bot API, the real app behind it.

The store is gated on the app's own `Storage` object (the one thing the test controls); PTB,
HTTP and the fake are real."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.exc import OperationalError

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, Harness, free_port, running, tg  # noqa: F401  (fixture)

SECRET = "ack-Secret_0123456789"


class GatedStore:
    """Wraps `Storage.receive_inbound`: `hold` makes the next store wait for ever (until it
    is cancelled), `fail` makes the next one raise; `committed_at` records when each real
    store returned."""

    def __init__(self, h: Harness) -> None:
        self._real: Callable[[Any], Awaitable[int | None]] = h.app.storage.receive_inbound
        self.mode: str | None = None
        self.entered = asyncio.Event()
        self.committed_at: list[float] = []
        h.app.storage.receive_inbound = self  # type: ignore[method-assign]

    async def __call__(self, message: Any) -> int | None:
        mode, self.mode = self.mode, None
        self.entered.set()
        if mode == "hold":
            await asyncio.Event().wait()  # never commits; cancelled when the app stops
        if mode == "fail":
            raise OperationalError("INSERT INTO inbox", {}, Exception("database is locked"))
        inbox_id = await self._real(message)
        self.committed_at.append(time.monotonic())
        return inbox_id


def echoes(tg: FakeTelegram, text: str) -> list[str]:
    return [m.text or "" for m in tg.bot_messages(OWNER) if m.text == f"echo: {text}"]


async def test_an_update_whose_store_never_committed_is_delivered_again_and_answered_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        gate = GatedStore(h)
        gate.mode = "hold"
        tg.send_private(OWNER, "remember the milk")
        async with asyncio.timeout(10):
            await gate.entered.wait()
        # The process goes away here, the store still in flight (as a kill would leave it).
    assert echoes(tg, "remember the milk") == []

    async with running(tmp_path, tg, fake_api, paced=False) as h:
        await h.says(OWNER, "echo: remember the milk")
        await h.app.conversations.lanes.drain()
    async with running(tmp_path, tg, fake_api, paced=False) as h:  # and never again
        tg.send_private(OWNER, "next")
        await h.says(OWNER, "echo: next")
        await h.app.conversations.lanes.drain()
    assert echoes(tg, "remember the milk") == ["echo: remember the milk"]
    assert len(fake_api.requests) == 2


async def test_a_failed_store_in_polling_is_asked_for_again_and_answered_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        gate = GatedStore(h)
        gate.mode = "fail"
        tg.send_private(OWNER, "are you there?")
        await h.says(OWNER, "echo: are you there?", timeout=20)  # after PTB's 1 s back-off
        tg.send_private(OWNER, "good")
        await h.says(OWNER, "echo: good")
        await h.app.conversations.lanes.drain()
    assert echoes(tg, "are you there?") == ["echo: are you there?"]
    assert len(fake_api.requests) == 2


async def test_the_webhook_answers_200_only_after_the_row_is_committed_and_500_when_the_store_fails(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    telegram = {"mode": "webhook", "webhook_url": url, "webhook_listen": f"127.0.0.1:{port}",
                "webhook_secret": SECRET}
    tg.retry_failed_webhooks(0.05)
    async with running(tmp_path, tg, fake_api, paced=False, telegram=telegram) as h:
        gate = GatedStore(h)
        gate.mode = "fail"
        update_id = tg.send_private(OWNER, "over the hook")
        await h.says(OWNER, "echo: over the hook")
        await h.app.conversations.lanes.drain()
    posts = [d for d in tg.webhook_responses if d.update_id == update_id]
    assert [d.status for d in posts] == [500, 200]  # Telegram retried the refused update
    (committed_at,) = gate.committed_at
    assert posts[1].at >= committed_at  # the 200 came once the row existed
    assert echoes(tg, "over the hook") == ["echo: over the hook"]
    assert len(fake_api.requests) == 1
