"""Three replicas of Roost on one PostgreSQL behind a load balancer (Telegram webhook mode):
messages of many chats posted round-robin to the replicas, some delivered to two of them,
are each answered exactly once, and every chat's answers keep the order it wrote in.

The replicas are three full apps in this test process (each its own engine, connections,
webhook server and lanes; they share only the database and the workspace), fed by HTTP
POSTs to their own webhook ports as a load balancer would; python-telegram-bot and the
anthropic SDK talk HTTP to the fakes.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, reply_text, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import _asyncpg_dsn, fresh_postgres_database
from tests.replica_support import until, webhook_replicas
from tests.telegram_harness import BOT_USERNAME, tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

TOKEN = re.compile(r"m-\d+-\d+")
CHATS = 30
PER_CHAT = 10
REPLICAS = 3
CONNECTIONS_PER_REPLICA = 14
"""bot.storage.engine: 10 pooled at most, plus lane locks, signals and up to two leads."""


def answer_tokens(body: dict[str, Any]) -> Reply:
    """Answers with the message tokens this run was given (its newest user message only)."""
    texts = [b.get("text", "") for b in user_blocks(body) if isinstance(b, dict) and b.get("type") == "text"]
    return reply_text("answer to " + " ".join(TOKEN.findall(" ".join(texts))))


def group_update(update_id: int, chat: int, sender: int, text: str) -> dict[str, Any]:
    mention = f"@{BOT_USERNAME}"
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id, "date": int(time.time()),
            "chat": {"id": chat, "type": "group", "title": f"Group {chat}"},
            "from": {"id": sender, "is_bot": False, "first_name": f"Member{sender}"},
            "text": f"{mention} {text}", "entities": [{"type": "mention", "offset": 0, "length": len(mention)}],
        },
    }


async def stored_updates(url: str, expected: int, timeout: float = 60) -> None:
    """Wait until the replicas have stored `expected` distinct updates (durable, ordered)."""
    conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))

    async def stored() -> bool:
        return await conn.fetchval("SELECT count(*) FROM seen_updates") >= expected

    try:
        await until(stored, timeout, f"{expected} updates stored")
    finally:
        await conn.close()


async def test_three_replicas_answer_each_message_once_in_each_chats_order(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = answer_tokens
    chats = [-1_000_000 - c for c in range(CHATS)]
    for chat in chats:
        tg.add_chat(chat, type="group", title=f"Group {chat}")
    sent: dict[int, list[str]] = {chat: [] for chat in chats}
    peak = 0

    async def count_connections(url: str) -> None:
        """The most connections the replicas held at once (sampled every 20 ms)."""
        nonlocal peak
        conn = await asyncpg.connect(_asyncpg_dsn(make_url(url)))
        try:
            while True:
                n = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid != pg_backend_pid()"
                )
                peak = max(peak, n)
                await asyncio.sleep(0.02)  # timing-ok: a sampling period, not a wait for a state
        finally:
            await conn.close()

    async with fresh_postgres_database() as url, webhook_replicas(tmp_path, tg, fake_api, url, REPLICAS) as started:
        sampler = asyncio.create_task(count_connections(url))
        hooks = [hook for _, hook in started]
        update_id = 10_000
        posted = 0
        for n in range(PER_CHAT):
            # One round: each chat's next message, round-robin over the replicas, the 10th
            # of each round also to a second replica (a load balancer retrying elsewhere).
            posts = []
            for c, chat in enumerate(chats):
                update_id += 1
                token = f"m-{c}-{n}"
                sent[chat].append(token)
                update = group_update(update_id, chat, 5000 + c, token)
                first = (n * CHATS + c) % REPLICAS
                posts.append(tg.apost_to_webhook(update, url=hooks[first]))
                if c % 10 == n % 10:
                    posts.append(tg.apost_to_webhook(update, url=hooks[(first + 1) % REPLICAS]))
            statuses = await asyncio.gather(*posts)
            assert all(s == 200 for s in statuses), statuses
            posted += CHATS
            # A chat's next message is sent once this one is stored, as Telegram does per chat.
            await stored_updates(url, posted)

        def answered() -> dict[int, list[str]]:
            return {
                chat: [t for m in tg.bot_messages(chat) if (m.text or "").startswith("answer to")
                       for t in TOKEN.findall(m.text or "")]
                for chat in chats
            }

        await tg.await_for(lambda: all(len(a) >= PER_CHAT for a in answered().values()), timeout=180)
        for h, _ in started:
            await h.app.conversations.lanes.drain()
        got = answered()
        for chat in chats:  # exactly once in the chat
            assert sorted(got[chat]) == sorted(sent[chat]), f"chat {chat}: answered {got[chat]}, sent {sent[chat]}"
        # Exactly once at the model too: each message reached one run's newest user turn.
        given = [t for r in fake_api.requests for b in user_blocks(r.json)
                 if isinstance(b, dict) and b.get("type") == "text" for t in TOKEN.findall(b.get("text", ""))]
        assert sorted(given) == sorted(t for tokens in sent.values() for t in tokens)
        assert await started[0][0].app.storage.inbox_rows({"queued", "running", "received"}) == []
        # In each chat's order, whichever replica stored or routed each message.
        disordered = {chat: got[chat] for chat in chats if got[chat] != sent[chat]}
        assert not disordered, f"answered out of the chat's order: {disordered}"
        sampler.cancel()
        # A deployment's connection budget (README): three busy replicas once held 53.
        assert 0 < peak <= REPLICAS * CONNECTIONS_PER_REPLICA, f"{peak} connections for {REPLICAS} replicas"
