"""The whole application (bot.app.build) with a recording adapter and the fake model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bot.app import Roost, build
from bot.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.recording_adapter import RecordingAdapter

OWNER_ID = "1"


def make_settings(tmp_path: Path, fake: FakeAnthropic, **overrides: Any) -> Settings:
    agent = {"model": "claude-test", "max_retries": 0, **overrides.pop("agent", {})}
    telegram = overrides.pop("telegram", {"allowed_groups": ["*"]})
    return Settings(
        home=tmp_path / "home",
        owners=[f"telegram:{OWNER_ID}"],
        anthropic_api_key="test-key",
        anthropic_base_url=fake.base_url,
        agent=agent,
        telegram=telegram,
        **overrides,
    )


@contextlib.asynccontextmanager
async def running_app(
    tmp_path: Path, fake: FakeAnthropic, **overrides: Any
) -> AsyncIterator[tuple[Roost, RecordingAdapter]]:
    adapter = RecordingAdapter("telegram")
    async with build(make_settings(tmp_path, fake, **overrides), [adapter]) as app:
        await adapter.start(app.conversations)
        yield app, adapter
