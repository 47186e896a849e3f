"""The first reply's path, update → model request, in storage round-trips: each is a whole
transaction (a turn of the group-commit task, BEGIN IMMEDIATE, statements, commit; a few ms
each on a loaded machine), so the count is the latency."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)

# receive (inbox row + seen update), accept (session + queued), take (running + session
# read), begin_run (run row + transcript + the user's message): durable before the ack,
# the user's message stored before the model is called.
FIRST_REPLY_TRANSACTIONS = 4


async def test_first_reply_takes_four_transactions_before_the_model_is_called(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "warm up")  # creates the session; later messages find it
        await h.bot_text(OWNER, lambda t: t == "echo: warm up" or bool(t))
        await h.app.conversations.lanes.drain()
        await h.app.conversations.metrics.settle()  # the warm-up's metrics row: not the ping's path

        begins: list[str] = []
        at_model: list[int] = []

        def on_begin(conn: Any) -> None:
            begins.append("begin")

        def answer(body: dict[str, Any]) -> Reply:
            at_model.append(len(begins))  # runs in the fake's thread when the request arrives
            return reply_text("pong")

        engines = h.app.storage.sync_engines
        for engine in engines:
            event.listen(engine, "begin", on_begin)
        fake_api.responder = answer
        try:
            tg.send_private(OWNER, "ping")
            await h.bot_text(OWNER, lambda t: t == "pong")
        finally:
            for engine in engines:
                event.remove(engine, "begin", on_begin)
        assert at_model == [FIRST_REPLY_TRANSACTIONS], f"{at_model} transactions before the model request"
