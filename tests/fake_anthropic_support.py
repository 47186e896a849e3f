"""Shared pieces of the fake Messages API tests: SDK clients bound to a fake, fixtures, and
small request builders."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from tests.fakes.anthropic_api import FakeAnthropic

MODEL = "claude-test"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
EPHEMERAL = {"type": "ephemeral"}
# Building an SDK client loads the CA bundle (~35 ms); share one context across the many clients.
_SSL = ssl.create_default_context()


def async_sdk(fake: FakeAnthropic, **options: Any) -> anthropic.AsyncAnthropic:
    options = {"base_url": fake.base_url, "api_key": "test-key", "max_retries": 0, **options}
    return anthropic.AsyncAnthropic(http_client=anthropic.DefaultAsyncHttpxClient(verify=_SSL), **options)


def sync_sdk(fake: FakeAnthropic, **options: Any) -> anthropic.Anthropic:
    options = {"base_url": fake.base_url, "api_key": "test-key", "max_retries": 0, **options}
    return anthropic.Anthropic(http_client=anthropic.DefaultHttpxClient(verify=_SSL), **options)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = async_sdk(fake)
    yield sdk
    await sdk.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_use(tool_id: str, city: str = "Paris") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {"city": city}}


def tool_result(tool_id: str, text: str = "sunny") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


TOOLS = [WEATHER_TOOL]


def base_request() -> dict[str, Any]:
    """The smallest valid request body."""
    return {"model": MODEL, "max_tokens": 32, "messages": [user("hi")]}
