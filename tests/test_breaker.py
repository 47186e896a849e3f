"""The per-model circuit breaker: its states on an injected clock, one probe at a time, and
one breaker shared by every session of the process (the real app, /status, roost doctor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from agent_core.breaker import Breakers, CircuitBreaker
from agent_core.events import Usage
from agent_core.failover import FailoverLLM
from agent_core.llm import LLMOverloaded, LLMRequest, MessageComplete, StreamItem, TextChunk
from agent_core.retry import RetryPolicy
from bot import breaker_report
from bot.doctor import run_checks
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_script import Error, reply_text
from tests.fakes.recording_adapter import private
from tests.failover_rig import BACKUP, PRIMARY, Clock, Rig, finished, rig  # noqa: F401  (rig: fixture)


def test_opens_after_three_consecutive_failures_only() -> None:
    clock = Clock()
    breaker = CircuitBreaker("m", clock=clock)
    for _ in range(2):
        permit = breaker.acquire()
        assert permit is not None
        permit.failure("overloaded")
    success = breaker.acquire()
    assert success is not None
    success.success()  # a success in between resets the count
    for n in range(3):
        assert breaker.state == "closed", n
        permit = breaker.acquire()
        assert permit is not None
        permit.failure("overloaded")
    assert breaker.state == "open" and breaker.acquire() is None
    assert breaker.status().retry_in_s == 60.0


def test_after_the_cooldown_one_probe_goes_and_its_success_closes() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 59.9
    assert breaker.acquire() is None
    clock.now += 0.1
    probe = breaker.acquire()
    assert probe is not None and probe.probe
    # Everyone else meanwhile is sent to the next model: exactly one probe.
    assert [breaker.acquire() for _ in range(5)] == [None] * 5
    probe.success()
    assert breaker.state == "closed" and breaker.status().failures == 0
    assert breaker.acquire() is not None


def test_failed_probe_waits_a_whole_cooldown_again() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 60
    probe = breaker.acquire()
    assert probe is not None
    clock.now += 5
    probe.failure("overloaded")
    assert breaker.state == "open" and breaker.status().retry_in_s == 60.0
    clock.now += 59
    assert breaker.acquire() is None
    clock.now += 1
    assert breaker.acquire() is not None


def test_probe_ended_without_verdict_frees_the_slot() -> None:
    # A /stop during the probe (or a request we got wrong) says nothing about the model:
    # the next caller may probe at once instead of waiting for a probe that never reports.
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 60
    probe = breaker.acquire()
    assert probe is not None
    probe.release()
    assert breaker.state == "half_open"
    again = breaker.acquire()
    assert again is not None and again.probe


def test_restart_starts_closed_whatever_was_reported(tmp_path: Path) -> None:
    # A saved cooldown must not block a provider that recovered while we were down: the
    # report is for display only.
    clock = Clock()
    breakers = Breakers(clock=clock, on_change=lambda b: breaker_report.write(tmp_path / "b.json", b))
    for _ in range(3):
        permit = breakers.for_model("m").acquire()
        assert permit is not None
        permit.failure("overloaded")
    reported = breaker_report.read(tmp_path / "b.json")
    assert reported is not None and reported[1][0].state == "open"
    assert Breakers(clock=clock).for_model("m").state == "closed"


def _opened(clock: Clock) -> CircuitBreaker:
    breaker = CircuitBreaker("m", clock=clock)
    for _ in range(3):
        permit = breaker.acquire()
        assert permit is not None
        permit.failure("overloaded")
    assert breaker.state == "open"
    return breaker


# ---- through the failover client -------------------------------------------------------


async def test_two_sessions_share_one_breaker(rig: Rig) -> None:
    rig.core.fake.script(Error(529), Error(529), Error(529))
    rig.core.fake.responder = lambda body: reply_text(f"answer from {body['model']}")
    events, _ = await rig.run("first", session_key="main")
    assert finished(events).model == BACKUP
    # Another session never calls the model the first found overloaded: straight to the backup.
    before = len(rig.core.fake.requests)
    events, visible = await rig.run("second", session_key="dm:telegram:2")
    assert finished(events).model == BACKUP
    assert [r.json["model"] for r in rig.core.fake.requests[before:]] == [BACKUP]
    assert "claude-test is paused after repeated failures" in visible
    # A minute later one probe goes to the primary; it answers and closes the breaker.
    rig.clock.now += 60
    before = len(rig.core.fake.requests)
    events, visible = await rig.run("third", session_key="dm:telegram:2")
    assert finished(events).model == PRIMARY and visible == f"answer from {PRIMARY}"
    assert [r.json["model"] for r in rig.core.fake.requests[before:]] == [PRIMARY]
    assert rig.breakers.for_model(PRIMARY).state == "closed"


class _GatedModel:
    """An LLMClient whose primary answers only once `release` is set (to hold a probe in
    flight) and whose backup answers at once; records which model each call asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()
        self.probing = asyncio.Event()
        self.fail_primary = True

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamItem]:
        self.calls.append(request.model)
        if request.model == PRIMARY:
            if self.fail_primary:
                raise LLMOverloaded("The model service is overloaded right now.")
            self.probing.set()
            await self.release.wait()
        yield TextChunk(f"from {request.model}")
        yield MessageComplete([{"type": "text", "text": f"from {request.model}"}], "end_turn", Usage(), request.model)


async def _collect(llm: FailoverLLM) -> str:
    request = LLMRequest(PRIMARY, [], [], [{"role": "user", "content": "hi"}])
    return "".join([i.text async for i in llm.stream(request) if isinstance(i, TextChunk)])


async def test_callers_during_the_probe_go_to_the_next_model() -> None:
    clock, inner = Clock(), _GatedModel()
    breakers = Breakers(clock=clock)

    async def no_wait(_: float) -> None:
        return None

    llm = FailoverLLM(inner, [BACKUP], retry=RetryPolicy(max_retries=2), breakers=breakers, sleep=no_wait)
    assert (await _collect(llm)).startswith(f"from {BACKUP}")
    assert inner.calls == [PRIMARY] * 3 + [BACKUP]
    clock.now += 60
    inner.fail_primary = False
    inner.calls.clear()
    async with asyncio.timeout(10), asyncio.TaskGroup() as tasks:
        probe = tasks.create_task(_collect(llm))
        await inner.probing.wait()
        # Three other sessions while the probe is in flight: none waits for it.
        others = [await _collect(llm) for _ in range(3)]
        assert all(o.startswith(f"from {BACKUP}") for o in others)
        inner.release.set()
    assert probe.result() == f"from {PRIMARY}"
    assert inner.calls == [PRIMARY, BACKUP, BACKUP, BACKUP]
    assert breakers.for_model(PRIMARY).state == "closed"


# ---- the real app: shared by every chat, shown by /status and roost doctor ---------------


async def test_breaker_is_shared_by_the_app_and_shown_in_status_and_doctor(tmp_path, fake_api) -> None:
    agent = {"fallback_models": [BACKUP]}
    async with running_app(tmp_path, fake_api, agent=agent) as (app, adapter):
        fake_api.responder = lambda body: Error(529) if body["model"] == PRIMARY else reply_text("backup here")
        # The harness sets max_retries=0: each message costs the primary one failure.
        for n in range(3):
            await adapter.say(private(OWNER_ID, f"message {n}"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == n + 1)
        assert [r.json["model"] for r in fake_api.requests] == [PRIMARY, BACKUP] * 3
        reply = adapter.closed_replies()[-1].outcome
        assert reply.text == "backup here\n\n(answered by claude-backup: claude-test was overloaded)"
        await adapter.say(private(OWNER_ID, "/status"))
        status = adapter.notices[-1][1]
        assert "claude-test: unavailable (overloaded), next try in 60 s" in status
        assert "claude-backup: ok" in status
        checks = {c.name: c for c in await run_checks(app.settings)}
        assert checks["model breakers"].status == "warn"
        assert "claude-test: open (overloaded)" in checks["model breakers"].detail
        # The next message (any chat) skips the primary.
        await adapter.say(private(OWNER_ID, "message 3"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 4)
        # (doctor also asked GET /v1/models/{id} about each configured model: not counted)
        asked = [r for r in fake_api.requests if r.path == "/v1/messages"]
        assert asked[-1].json["model"] == BACKUP and len(asked) == 7



async def test_model_chosen_with_slash_model_falls_back_to_the_configured_one(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api, agent={"fallback_models": [BACKUP]}) as (app, adapter):
        await adapter.say(private(OWNER_ID, f"/model {BACKUP}"))
        fake_api.responder = lambda body: Error(529) if body["model"] == BACKUP else reply_text("configured here")
        await adapter.say(private(OWNER_ID, "hello"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        assert [r.json["model"] for r in fake_api.requests] == [BACKUP, PRIMARY]
        reply = adapter.closed_replies()[0].outcome
        # The user's choice did not answer: they are told which model did.
        assert reply.text == "configured here\n\n(answered by claude-test: claude-backup was overloaded)"


class _DownStore:
    """A `BreakerStore` whose database is away: every call fails."""

    async def load_breaker(self, model: str):  # noqa: ANN201
        raise OSError("connection refused")

    async def load_breakers(self):  # noqa: ANN201
        raise OSError("connection refused")

    async def change_breaker(self, model: str, change):  # noqa: ANN001, ANN201
        raise OSError("connection refused")


async def test_a_shared_breaker_whose_database_is_away_still_breaks_on_this_replicas_own_view() -> None:
    """Replicas share breakers through the database; when it does not answer, a model call
    neither fails for it nor loses the breaker: the replica counts and opens on its own."""
    clock = Clock()
    breakers = Breakers(clock=clock, store=_DownStore())
    for _ in range(3):
        permit = await breakers.acquire("m")
        assert permit is not None
        await breakers.failed(permit, "overloaded")
        await breakers.release(permit)
    assert await breakers.acquire("m") is None and breakers.for_model("m").state == "open"
    await breakers.refresh()  # /status while the database is away: this replica's view
    assert [s.state for s in breakers.statuses()] == ["open"]
    clock.now += 60
    probe = await breakers.acquire("m")
    assert probe is not None and probe.probe
    await breakers.succeeded(probe)
    assert breakers.for_model("m").state == "closed"
