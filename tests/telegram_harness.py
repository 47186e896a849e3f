"""Wire-level harness: the real app (`bot.app.build`) + `TelegramAdapter`, with
python-telegram-bot talking HTTP to `FakeTelegram` and the real anthropic SDK talking HTTP
to `FakeAnthropic`. Nothing is patched; waiting is on the fakes' change events."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from telegram.request import HTTPXRequest

from adapters.render.chunks import ChunkSpec, plan_chunks
from adapters.telegram import TelegramAdapter
from bot.app import Roost, build
from bot.platforms import telegram_adapter
from bot.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import Call, StoredMessage

TOKEN = "123456:TEST-token_for-roost"
BOT_USERNAME = "roost_bot"
OWNER = 1
STRANGER = 42
MEMBER = 77
GROUP = -1001234567
TELEGRAM_SPEC = ChunkSpec.create(4096, "utf16", False)
FAST_INTERVAL_S = 0.05
PAIRING_CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")


def plain_http(pool: int = 128, read_timeout: float = 5.0) -> HTTPXRequest:
    """The fakes speak plain HTTP: skipping the CA bundle saves ~0.1 s per client."""
    return HTTPXRequest(connection_pool_size=pool, read_timeout=read_timeout, httpx_kwargs={"verify": False})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendered(answer: str) -> list[str]:
    """The texts of the messages a complete answer must end as."""
    return [p.text for p in plan_chunks(answer, TELEGRAM_SPEC)]


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN, bot_username=BOT_USERNAME) as fake:
        fake.add_chat(OWNER, type="private", first_name="Olivia")
        yield fake


def telegram_settings(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, **overrides: Any) -> Settings:
    agent = {"model": "claude-test", "max_retries": 0, **overrides.pop("agent", {})}
    telegram = {"base_url": tg.base_url, "allowed_groups": ["*"], **overrides.pop("telegram", {})}
    return Settings(
        home=tmp_path / "home",
        owners=[f"telegram:{OWNER}"],
        anthropic_api_key="test-key",
        anthropic_base_url=llm.base_url,
        telegram_bot_token=TOKEN,
        agent=agent,
        telegram=telegram,
        **overrides,
    )


def adapter_for(settings: Settings, **kwargs: Any) -> TelegramAdapter:
    """Built like `bot.platforms.configured_adapters`, plus plain-HTTP request objects."""
    kwargs.setdefault("request", plain_http())
    return telegram_adapter(settings, get_updates_request=plain_http(1), **kwargs)


@dataclass
class Harness:
    app: Roost
    adapter: TelegramAdapter
    tg: FakeTelegram
    llm: FakeAnthropic

    @property
    def workspace(self) -> Path:
        return self.app.settings.workspace_dir

    async def bot_text(self, chat_id: int, predicate: Callable[[str], bool], timeout: float = 10.0) -> StoredMessage:
        """The first bot message in the chat whose current text satisfies `predicate`."""

        def find() -> StoredMessage | None:
            return next((m for m in self.tg.bot_messages(chat_id) if m.text and predicate(m.text)), None)

        found = await self.tg.await_for(find, timeout)
        assert found is not None
        return found

    async def says(self, chat_id: int, text: str, timeout: float = 10.0) -> StoredMessage:
        return await self.bot_text(chat_id, lambda t: t == text, timeout)

    def sends_to(self, chat_id: int) -> list[Call]:
        return [
            c for c in self.tg.calls
            if c.method in ("sendMessage", "sendDocument") and c.params.get("chat_id") == chat_id
        ]

    def edits_in(self, chat_id: int) -> list[Call]:
        return [
            c for c in self.tg.calls
            if c.method == "editMessageText" and c.params.get("chat_id") == chat_id
        ]


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeAnthropic,
    *,
    paced: bool = True,
    adapter_kwargs: dict[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """Start like `roost run`: build, start the adapter, recover deliveries; close in the
    CLI's order (runs stopped while the adapter is still open, then the adapter). `paced=False` shortens the per-chat intervals
    to 50 ms, for tests about routing rather than pacing (a chat of 8 commands would
    otherwise take 8 s, 24 s in a group)."""
    settings = telegram_settings(tmp_path, tg, llm, **overrides)
    kwargs = {} if paced else {"private_interval_s": FAST_INTERVAL_S, "group_interval_s": FAST_INTERVAL_S}
    adapter = adapter_for(settings, **kwargs, **(adapter_kwargs or {}))
    async with build(settings, [adapter]) as app:
        await app.conversations.load_inbox()
        await adapter.start(app.conversations)
        try:
            await app.conversations.recover_deliveries()
            await app.conversations.replay_inbox()
            yield Harness(app, adapter, tg, llm)
        finally:
            try:
                await app.conversations.aclose()
            finally:
                await adapter.aclose()
