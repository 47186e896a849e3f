"""Two replicas of Roost on one PostgreSQL serving one Telegram bot in polling mode.

Telegram serves getUpdates to one consumer of a bot: a second poller gets 409 Conflict and
each preempts the other's long poll (the fake does the same). Only the holder of the
"telegram-polling" lead polls (adapters/telegram/polling.py); the other sends only.

Invariant: no getUpdates of the two replicas ever conflicts while the lead is settled; when
the poller lets the lead go (shutting down) the other polls within seconds, and every
message is answered once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, last_user_text
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import fresh_postgres_database
from tests.telegram_harness import OWNER, Harness, running, tg  # noqa: F401  (tg is a fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py


@contextlib.asynccontextmanager
async def two_pollers(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    async with contextlib.AsyncExitStack() as stack:
        replicas = []
        for name in ("a", "b"):  # A starts first: it polls
            replicas.append(await stack.enter_async_context(running(
                tmp_path / name, tg, llm, paced=False, database_url=url, workspace=tmp_path / "workspace",
            )))  # fmt: skip
        yield replicas[0], replicas[1]


def answers(tg: FakeTelegram) -> list[str]:
    return [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]


def conflicts(tg: FakeTelegram) -> list[str]:
    return [c.description or "" for c in tg.calls_of("getUpdates") if c.status == 409]


async def test_two_replicas_in_polling_mode_never_conflict_and_the_other_polls_after_a_hand_over(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))
    async with fresh_postgres_database() as url, two_pollers(tmp_path, tg, fake_api, url) as (a, b):
        tg.send_private(OWNER, "first", first_name="Olivia")
        await tg.await_for(lambda: answers(tg) == ["answer to first"], timeout=20)
        await a.adapter.hand_over()  # A stops (a rolling restart): B polls once the lead is its own
        tg.send_private(OWNER, "second", first_name="Olivia")
        await tg.await_for(lambda: "answer to second" in answers(tg), timeout=20)
        await a.app.conversations.lanes.drain()
        await b.app.conversations.lanes.drain()
        assert answers(tg) == ["answer to first", "answer to second"]
        assert conflicts(tg) == []  # never two pollers at once
        assert len(fake_api.requests) == 2
