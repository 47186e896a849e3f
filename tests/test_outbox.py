"""The shared outbox: keyed coalescing, per-chat pacing, priorities, 429 pause, lifecycle."""

from __future__ import annotations

import asyncio

import pytest

from adapters.errors import RateLimited
from adapters.outbox import Outbox, Priority
from adapters.stream import StreamRenderer
from agent_core.events import RunFinished, TextDelta, Usage
from tests.fakes.transport import FakeClock, FakeTransport


class Recorder:
    """Actions that record (time, label, state-at-run-time)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.runs: list[tuple[float, str, object]] = []
        self.state: dict[str, object] = {}

    def action(self, label: str, fail: list[Exception] | None = None):
        async def run() -> bool:
            if fail:
                raise fail.pop(0)
            self.runs.append((self.clock(), label, self.state.get(label)))
            return True

        return run


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_edits_coalesce_to_latest(clock: FakeClock) -> None:
    rec = Recorder(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        rec.state["m"] = "v1"
        ob.submit("c", "m", rec.action("m"))
        await clock.settle()
        for v in ("v2", "v3", "v4"):  # arrive while the chat is paced
            rec.state["m"] = v
            ob.submit("c", "m", rec.action("m"))
            await clock.advance(0.2)
        await clock.run(ob.drain())
    assert rec.runs == [(0.0, "m", "v1"), (1.0, "m", "v4")]


async def test_pacing_is_per_chat(clock: FakeClock) -> None:
    rec = Recorder(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for i in range(3):
            ob.submit("a", ("a", i), rec.action(f"a{i}"), interval=1.0)
            ob.submit("b", ("b", i), rec.action(f"b{i}"), interval=2.0)
        await clock.run(ob.drain())
    times = {label: t for t, label, _ in rec.runs}
    assert [times[f"a{i}"] for i in range(3)] == [0.0, 1.0, 2.0]
    assert [times[f"b{i}"] for i in range(3)] == [0.0, 2.0, 4.0]  # a's pace does not hold b


async def test_send_before_delete_before_edit(clock: FakeClock) -> None:
    rec = Recorder(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("c", "e", rec.action("edit"), priority=Priority.EDIT, interval=0)
        ob.submit("c", "d", rec.action("delete"), priority=Priority.DELETE, interval=0)
        ob.submit("c", "s", rec.action("send"), priority=Priority.SEND, interval=0)
        await clock.run(ob.drain())
    assert [label for _, label, _ in rec.runs] == ["send", "delete", "edit"]


async def test_429_pauses_every_chat_and_retries_with_latest_state(clock: FakeClock) -> None:
    rec = Recorder(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        rec.state["m"] = "old"
        ob.submit("a", "m", rec.action("m", fail=[RateLimited(3.0)]))
        await clock.settle()
        assert ob.paused and ob.paused_until == 3.0
        rec.state["m"] = "new"
        ob.submit("b", "other", rec.action("other"))
        await clock.run(ob.drain())
    assert rec.runs == [(3.0, "m", "new"), (3.0, "other", None)]


async def test_action_that_makes_no_request_does_not_consume_the_pace(clock: FakeClock) -> None:
    runs: list[float] = []

    async def noop() -> bool:
        runs.append(clock())
        return False

    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for _ in range(3):
            ob.submit("c", "k", noop)
            await clock.run(ob.drain())
    assert runs == [0.0, 0.0, 0.0]


async def test_failing_action_does_not_stop_the_outbox(clock: FakeClock) -> None:
    rec = Recorder(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("c", "bad", rec.action("bad", fail=[RuntimeError("bug")]), interval=0)
        ob.submit("c", "good", rec.action("good"), interval=0)
        await clock.run(ob.drain())
    assert [label for _, label, _ in rec.runs] == ["good"]


async def test_aclose_drops_pending_and_tells_the_submitter(clock: FakeClock) -> None:
    rec = Recorder(clock)
    dropped: list[str] = []
    ob = Outbox(clock=clock, sleep=clock.sleep)
    ob.submit("c", "1", rec.action("1"))
    ob.submit("c", "2", rec.action("2"), on_drop=lambda: dropped.append("2"))
    await clock.settle()
    await ob.aclose()
    assert [label for _, label, _ in rec.runs] == ["1"] and dropped == ["2"]
    with pytest.raises(RuntimeError):
        ob.submit("c", "3", rec.action("3"))


async def test_aclose_cancels_the_in_flight_request(clock: FakeClock) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> bool:
        started.set()
        try:
            await clock.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    ob = Outbox(clock=clock, sleep=clock.sleep)
    ob.submit("c", "k", slow)
    await started.wait()
    await ob.aclose()  # returns normally: the worker's cancellation is not ours
    assert cancelled.is_set()


async def test_two_replies_in_one_chat_share_the_pace(clock: FakeClock) -> None:
    transport = FakeTransport(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        first = StreamRenderer(transport, ob, clock=clock, sleep=clock.sleep)
        second = StreamRenderer(transport, ob, clock=clock, sleep=clock.sleep)
        for step in range(20):
            await first.feed(TextDelta(f"first reply, sentence number {step}. "))
            await second.feed(TextDelta(f"second reply, sentence number {step}. "))
            await clock.advance(0.1)
        for r in (first, second):
            await r.feed(RunFinished("r", "end_turn", 1, Usage(), ""))
        await clock.run(asyncio.gather(first.finish(), second.finish()))
        await first.aclose()
        await second.aclose()
    times = [c.at for c in transport.calls if c.kind in ("send", "edit")]
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(times, times[1:])), times
    assert len(transport.texts()) == 2 and transport.not_modified == 0
