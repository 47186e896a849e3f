"""Shared pieces of the failover and breaker tests: an agent loop whose model client is
FailoverLLM over the real SDK and the fake Messages API, with injected sleep and clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_core.anthropic_llm import AnthropicLLM
from agent_core.breaker import Breakers
from agent_core.events import Event, RunFailed, RunFinished, TextDelta
from agent_core.continuation import CONTINUE_PROMPT
from agent_core.failover import FailoverLLM
from agent_core.models import ModelFacts, ModelTable
from agent_core.retry import RetryPolicy
from agent_core.risk import Scope
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_models import FakeModel
from tests.fakes.anthropic_script import Response, reply_text
from tests.harness import CoreHarness, make_harness

PRIMARY, BACKUP = "claude-test", "claude-backup"
ANSWER = "The capital of France is Paris, a city on the Seine known for its museums."


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Sleeps:
    """An injected sleep: records what was asked and returns at once."""

    asked: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


@dataclass
class Rig:
    core: CoreHarness
    llm: AnthropicLLM
    sleeps: Sleeps
    clock: Clock
    breakers: Breakers

    async def run(self, text: str = "hi", session_key: str = "main") -> tuple[list[Event], str]:
        scope = Scope.MAIN if session_key == "main" else Scope.SUB
        events = await self.core.run(text, session_key=session_key, scope=scope)
        visible = "".join(e.text for e in events if isinstance(e, TextDelta))
        return events, visible

    async def stored_answer(self, session_key: str = "main") -> str:
        transcript = await self.core.storage.load_transcript(session_key)
        last = transcript[-1]
        assert last["role"] == "assistant", transcript
        return "".join(b["text"] for b in last["content"] if b["type"] == "text")


@pytest.fixture
async def rig(fake_api: FakeAnthropic, tmp_path: Path) -> AsyncIterator[Rig]:
    rig = await make_rig(fake_api, tmp_path)
    try:
        yield rig
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def make_rig(
    fake: FakeAnthropic, tmp_path: Path, *, fallbacks: tuple[str, ...] = (BACKUP,), **options: Any
) -> Rig:
    # Like today's models, both refuse a prefill (the fake answers one with the service's 400);
    # `prefill=True` makes Roost's table and the fake both accept it.
    prefill = options.pop("prefill", False)
    for model in (PRIMARY, BACKUP):
        fake.models[model] = FakeModel(model, model, prefill=prefill)
    facts = options.pop("facts", ModelTable({m: ModelFacts(prefill=prefill) for m in (PRIMARY, BACKUP)}))
    core = await make_harness(fake, tmp_path)
    llm = AnthropicLLM(
        api_key="test-key", base_url=fake.base_url, stall_timeout_s=options.pop("stall_timeout_s", 60.0)
    )
    clock, sleeps = Clock(), Sleeps()
    breakers = Breakers(clock=clock)
    core.loop._llm = FailoverLLM(
        llm, fallbacks, retry=options.pop("retry", RetryPolicy()), breakers=breakers, sleep=sleeps,
        rand=lambda: 1.0, facts=facts, **options,
    )  # fmt: skip
    core.loop.models = facts  # the loop's windows and the failover's come from one table
    return Rig(core, llm, sleeps, clock, breakers)


def finished(events: list[Event]) -> RunFinished:
    assert sum(isinstance(e, (RunFinished, RunFailed)) for e in events) == 1, events
    assert isinstance(events[-1], RunFinished), events[-1]
    return events[-1]


def shown_before_continuing(body: dict[str, Any]) -> str | None:
    """The text Roost asked the model to continue — a prefill, or the assistant turn before
    Roost's "continue" user turn — or None when the request is not a continuation."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "user":
        texts = [b.get("text") for b in last["content"] if isinstance(b, dict)] if isinstance(last["content"], list) else []
        if CONTINUE_PROMPT not in texts:
            return None
        last = messages[-2]
    return "".join(b["text"] for b in last["content"] if b["type"] == "text")


def continue_answer(full: str, *, restart: bool = False) -> Any:
    """A responder that answers like a model asked to continue: the rest of `full` after the
    shown text; with `restart` (an endpoint that ignores prefill) or when not asked to
    continue, the whole of `full`. So the final visible text is `full` exactly when nothing
    was duplicated or lost, whatever part of the broken stream reached the client."""

    def respond(body: dict[str, Any]) -> Response:
        shown = shown_before_continuing(body)
        if shown is None or restart:
            return reply_text(full, chunk_size=7)
        assert full.startswith(shown), (full, shown)
        return reply_text(full[len(shown) :], chunk_size=7)

    return respond


async def assert_next_run_is_valid(rig: Rig) -> None:
    """The stored conversation is sent whole with the next request: the strict fake would
    answer 400 if anything in it were invalid."""
    rig.core.fake.responder = lambda body: reply_text("still here")
    events, visible = await rig.run("and now?")
    # (a fallback may answer while a breaker is open, with its note)
    assert finished(events).text == visible and visible.startswith("still here")
    assert await rig.stored_answer() == "still here"
    assert rig.core.fake.requests[-1].status == 200
