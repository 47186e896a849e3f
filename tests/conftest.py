"""Shared fixtures: the strict fake Messages API and the core harness."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.harness import CoreHarness, make_harness

pytest_plugins = ["tests.pg_accounting", "tests.timeout_tasks"]

_QUIETED = ("httpx", "httpx2", "alembic")


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """A test that sets up Roost's logging (or its redacting stdout/stderr) gets the
    process's state back afterwards: otherwise later tests log at INFO into the closed
    capture stream of the one that set it up ("Logging error ... closed file" noise)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in _QUIETED}
    stdout, stderr = sys.stdout, sys.stderr
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in levels.items():
        logging.getLogger(name).setLevel(saved)
    sys.stdout, sys.stderr = stdout, stderr


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
