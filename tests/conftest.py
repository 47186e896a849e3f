"""Shared fixtures: the strict fake Messages API and the core harness."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.harness import CoreHarness, make_harness

pytest_plugins = ["tests.pg_accounting"]


@pytest.fixture
def fake_api() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
async def core(fake_api: FakeAnthropic, tmp_path: Path) -> AsyncIterator[CoreHarness]:
    harness = await make_harness(fake_api, tmp_path)
    try:
        yield harness
    finally:
        await harness.llm.aclose()
        await harness.storage.aclose()
