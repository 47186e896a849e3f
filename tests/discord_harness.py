"""Wire-level harness: the real app (`bot.app.build`) + `DiscordAdapter`, with discord.py
talking HTTP and a websocket to `FakeDiscord` (through ROOST_DISCORD__API_BASE and
ROOST_DISCORD__GATEWAY_URL) and the real anthropic SDK talking to `FakeAnthropic`.
Nothing is patched; waiting is on the fakes' change events."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.discord import DiscordAdapter
from adapters.render.chunks import ChunkSpec, plan_chunks
from bot.app import Roost, build
from bot.platforms import discord_adapter
from bot.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_state import Call, StoredMessage

TOKEN = "MTA-fake.discord-token_for-roost"
OWNER = "111111111111111111"
STRANGER = "222222222222222222"
MEMBER = "333333333333333333"
GUILD = "500000000000000000"
CHANNEL = "500000000000000001"
OTHER_CHANNEL = "500000000000000002"
THREAD = "500000000000000009"
TG_OWNER = 1
DISCORD_SPEC = ChunkSpec.create(2000, "chars", True)
FAST_INTERVAL_S = 0.05
PAIRING_CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")


def rendered(answer: str) -> list[str]:
    return [p.text for p in plan_chunks(answer, DISCORD_SPEC)]


def world(fake: FakeDiscord) -> FakeDiscord:
    fake.add_user(OWNER, "olivia")
    fake.add_user(STRANGER, "sam")
    fake.add_user(MEMBER, "mallory")
    fake.add_guild(GUILD, [CHANNEL, OTHER_CHANNEL])
    return fake


@pytest.fixture
def dc() -> Iterator[FakeDiscord]:
    with FakeDiscord(token=TOKEN) as fake:
        yield world(fake)
        # Every test on the fake: no request that could carry content left pings possible.
        assert not fake.unsuppressed, f"requests without allowed_mentions suppressing pings: {fake.unsuppressed}"


def discord_settings(tmp_path: Path, dc: FakeDiscord, llm: FakeAnthropic, **overrides: Any) -> Settings:
    agent = {"model": "claude-test", "max_retries": 0, **overrides.pop("agent", {})}
    discord = {"api_base": dc.api_base, "gateway_url": dc.gateway_url, "allowed_channels": [CHANNEL],
               **overrides.pop("discord", {})}
    return Settings(
        home=tmp_path / "home",
        owners=overrides.pop("owners", [f"discord:{OWNER}", f"telegram:{TG_OWNER}"]),
        anthropic_api_key="test-key",
        anthropic_base_url=llm.base_url,
        discord_bot_token=TOKEN,
        agent=agent,
        discord=discord,
        **overrides,
    )


@dataclass
class Harness:
    app: Roost
    adapter: DiscordAdapter
    dc: FakeDiscord
    llm: FakeAnthropic

    @property
    def workspace(self) -> Path:
        return self.app.settings.workspace_dir

    async def bot_text(
        self, channel: str, predicate: Callable[[str], bool], timeout: float = 10.0, *, ephemeral: bool = False
    ) -> StoredMessage:
        def find() -> StoredMessage | None:
            return next((m for m in self.dc.bot_messages(channel, ephemeral=ephemeral) if predicate(m.content)), None)

        return await self.dc.await_for(find, timeout)

    def changes_in(self, channel: str) -> list[Call]:
        """Every message send and edit in the channel, in order."""
        return [
            c for c in self.dc.calls
            if c.status == 200 and c.method in ("POST", "PATCH")
            and c.path.startswith(f"/channels/{channel}/messages")
        ]


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    dc: FakeDiscord,
    llm: FakeAnthropic,
    *,
    paced: bool = True,
    adapter_kwargs: dict[str, Any] | None = None,
    extra_adapters: list[Any] | None = None,
    prepare: Callable[[Any], None] | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """Start like `roost run` (build, start, recover, replay); close in the CLI's order.
    `paced=False` shortens the per-channel interval to 50 ms for tests not about pacing;
    `prepare(app)` runs before anything is recovered (e.g. to inject clocks)."""
    settings = discord_settings(tmp_path, dc, llm, **overrides)
    kwargs: dict[str, Any] = {"guild_ready_timeout_s": 0.2}  # the fake sends every guild at once
    if not paced:
        kwargs["edit_interval_s"] = FAST_INTERVAL_S
    adapter = discord_adapter(settings, **kwargs, **(adapter_kwargs or {}))
    others = list(extra_adapters or [])
    async with build(settings, [adapter, *others]) as app:
        if prepare is not None:
            prepare(app)
        await app.conversations.load_inbox()
        await adapter.start(app.conversations)
        for other in others:
            await other.start(app.conversations)
        try:
            await app.conversations.close_expired_cards(app.expired_at_start)
            await app.conversations.recover_deliveries()
            await app.conversations.replay_inbox()
            yield Harness(app, adapter, dc, llm)
        finally:
            try:
                await app.conversations.aclose()
            finally:
                await adapter.aclose()
