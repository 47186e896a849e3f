"""The shared outbox: keyed coalescing, per-chat pacing, priorities, 429 pause, lifecycle."""

from __future__ import annotations

import asyncio

import pytest

from adapters.errors import RateLimited
from adapters.outbox import Outbox, Pace, Priority
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


# -- concurrency across chats ------------------------------------------------------------


class Gated:
    """Actions that stay in flight until the test releases them (a slow platform), counting
    requests in flight per chat and overall."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.started: list[tuple[float, str]] = []
        self.cancelled: list[str] = []
        self.in_flight: dict[str, int] = {}
        self.max_per_chat = 0
        self.max_total = 0
        self._started: dict[str, asyncio.Event] = {}
        self._release: dict[str, asyncio.Event] = {}

    @staticmethod
    def _event(events: dict[str, asyncio.Event], label: str) -> asyncio.Event:
        return events.setdefault(label, asyncio.Event())

    def action(self, chat: str, label: str, fail: list[Exception] | None = None):
        async def run() -> bool:
            self.in_flight[chat] = self.in_flight.get(chat, 0) + 1
            self.max_per_chat = max(self.max_per_chat, self.in_flight[chat])
            self.max_total = max(self.max_total, sum(self.in_flight.values()))
            self.started.append((self.clock(), label))
            self._event(self._started, label).set()
            try:
                await self._event(self._release, label).wait()
            except asyncio.CancelledError:
                self.cancelled.append(label)
                raise
            finally:
                self.in_flight[chat] -= 1
            if fail:
                raise fail.pop(0)
            return True

        return run

    async def wait_started(self, *labels: str) -> None:
        for label in labels:
            await asyncio.wait_for(self._event(self._started, label).wait(), timeout=2.0)

    def release(self, *labels: str) -> None:
        for label in labels:
            self._event(self._release, label).set()

    def labels(self) -> list[str]:
        return [label for _, label in self.started]


async def test_different_chats_have_requests_in_flight_at_once(clock: FakeClock) -> None:
    gate = Gated(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("a", "ma", gate.action("a", "a1"), interval=0)
        ob.submit("b", "mb", gate.action("b", "b1"), interval=0)
        await gate.wait_started("a1", "b1")  # neither released: both are on the wire
        assert gate.max_total == 2 and not ob.paused
        gate.release("a1", "b1")
        await clock.run(ob.drain())
    assert gate.max_per_chat == 1


async def test_workers_bound_the_requests_in_flight(clock: FakeClock) -> None:
    gate = Gated(clock)
    async with Outbox(clock=clock, sleep=clock.sleep, workers=2) as ob:
        for chat in "abc":
            ob.submit(chat, chat, gate.action(chat, chat), interval=0)
        await gate.wait_started("a", "b")
        await clock.settle()
        assert gate.labels() == ["a", "b"]  # c waits for a free worker
        gate.release("a")
        await gate.wait_started("c")
        gate.release("b", "c")
        await clock.run(ob.drain())
    assert gate.max_total == 2


async def test_one_chat_never_has_two_requests_in_flight(clock: FakeClock) -> None:
    gate = Gated(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("a", "m1", gate.action("a", "a1"), interval=0)
        ob.submit("b", "mb", gate.action("b", "b1"), interval=0)
        await gate.wait_started("a1", "b1")
        # While a1 is on the wire, chat a gets an edit (three times: they coalesce), an
        # edit of the in-flight message and a send; b's request finishes meanwhile.
        for v in range(3):
            ob.submit("a", "m2", gate.action("a", f"edit{v}"), priority=Priority.EDIT, interval=0)
        ob.submit("a", "m1", gate.action("a", "a1-again"), priority=Priority.EDIT, interval=0)
        ob.submit("a", "m3", gate.action("a", "send"), priority=Priority.SEND, interval=0)
        gate.release("b1")
        await clock.settle()
        assert gate.labels() == ["a1", "b1"]  # free workers, but chat a is busy
        gate.release("a1", "send", "edit2", "a1-again")
        await clock.run(ob.drain())
    assert gate.labels() == ["a1", "b1", "send", "edit2", "a1-again"]
    assert gate.max_per_chat == 1


async def test_429_in_one_chat_pauses_the_other_chat_too(clock: FakeClock) -> None:
    gate = Gated(clock)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("a", "ma", gate.action("a", "a1", fail=[RateLimited(3.0)]), interval=0)
        ob.submit("b", "mb", gate.action("b", "b1"), interval=0)
        await gate.wait_started("a1", "b1")
        ob.submit("a", "ma", gate.action("a", "a1-newer"), interval=0)  # newer state for ma
        gate.release("a1")
        await clock.settle()
        assert ob.paused and ob.paused_until == 3.0
        ob.submit("b", "mb2", gate.action("b", "b2"), interval=0)
        gate.release("b1", "b2", "a1-newer")  # b1 was already on the wire: it finishes
        await clock.advance(2.9)
        assert gate.labels() == ["a1", "b1"]  # b2 waits out a's 429 as well
        await clock.run(ob.drain())
    assert gate.started[2:] == [(3.0, "a1-newer"), (3.0, "b2")]  # the retry carries the newest


async def test_pacing_is_per_chat_while_chats_overlap(clock: FakeClock) -> None:
    starts: dict[str, list[float]] = {"a": [], "b": []}
    in_flight: set[str] = set()
    overlapped: list[float] = []

    def action(chat: str):
        async def run() -> bool:
            starts[chat].append(clock())
            in_flight.add(chat)
            if len(in_flight) > 1:
                overlapped.append(clock())
            await clock.sleep(0.5)  # the platform takes half a second
            in_flight.discard(chat)
            return True

        return run

    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for i in range(3):
            ob.submit("a", ("a", i), action("a"), interval=1.0)
            ob.submit("b", ("b", i), action("b"), interval=2.0)
        await clock.run(ob.drain())
    assert starts == {"a": [0.0, 1.0, 2.0], "b": [0.0, 2.0, 4.0]}
    assert overlapped == [0.0, 2.0]


async def test_aclose_with_requests_in_flight_leaves_no_task_behind(clock: FakeClock) -> None:
    gate = Gated(clock)
    dropped: list[str] = []
    before = asyncio.all_tasks()
    ob = Outbox(clock=clock, sleep=clock.sleep)
    for chat in "abc":
        ob.submit(chat, chat, gate.action(chat, chat), on_drop=lambda c=chat: dropped.append(c))
    ob.submit("a", "a-next", gate.action("a", "a-next"), on_drop=lambda: dropped.append("a-next"))
    await gate.wait_started("a", "b", "c")
    await ob.aclose()
    assert sorted(gate.cancelled) == ["a", "b", "c"]
    assert sorted(dropped) == ["a", "a-next", "b", "c"]
    assert asyncio.all_tasks() == before
    await asyncio.wait_for(ob.drain(), timeout=2.0)


async def test_aclose_right_after_dispatch_drops_ops_that_never_started(clock: FakeClock) -> None:
    gate = Gated(clock)
    dropped: list[str] = []
    before = asyncio.all_tasks()
    ob = Outbox(clock=clock, sleep=clock.sleep)
    for chat in "ab":
        ob.submit(chat, chat, gate.action(chat, chat), on_drop=lambda c=chat: dropped.append(c))
    await asyncio.sleep(0)  # the dispatcher hands both ops to tasks that have not run yet
    await ob.aclose()
    assert gate.started == [] and sorted(dropped) == ["a", "b"]
    assert asyncio.all_tasks() == before


# -- bursts and fairness (Pace) -------------------------------------------------------


async def test_a_rested_chat_bursts_then_keeps_the_sustained_pace(clock: FakeClock) -> None:
    rec = Recorder(clock)
    pace = Pace(interval=1.0, burst=3)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for i in range(5):
            ob.submit("c", i, rec.action(f"s{i}"), priority=Priority.SEND, pace=pace)
        await clock.run(ob.drain())
        assert [t for t, _, _ in rec.runs] == [0.0, 0.0, 0.0, 1.0, 2.0]
        await clock.advance(1.5)  # 1.5 tokens back: one request at once, the next paced
        ob.submit("c", "x", rec.action("x"), priority=Priority.SEND, pace=pace)
        ob.submit("c", "y", rec.action("y"), priority=Priority.SEND, pace=pace)
        await clock.run(ob.drain())
    assert [t for t, _, _ in rec.runs[5:]] == [3.5, 4.0]


async def test_first_send_of_a_new_reply_is_not_held_by_the_previous_replys_pace(clock: FakeClock) -> None:
    """The chat's last request was 0.6 s ago: with one token left, the send goes at once
    (it used to wait for 1.05 s after the last request)."""
    rec = Recorder(clock)
    pace = Pace(interval=1.05, burst=3)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("c", "previous", rec.action("previous"), priority=Priority.SEND, pace=pace)
        await clock.run(ob.drain())
        await clock.advance(0.6)
        ob.submit("c", "next", rec.action("next"), priority=Priority.SEND, pace=pace)
        await clock.run(ob.drain())
    assert rec.runs[-1][:2] == (0.6, "next")


async def test_edits_of_one_message_stay_an_interval_apart_whatever_the_burst(clock: FakeClock) -> None:
    rec = Recorder(clock)
    pace = Pace(interval=1.05, burst=3)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for v in range(4):
            rec.state["m"] = v
            ob.submit("c", "m", rec.action("m"), pace=pace)
            await clock.advance(0.1)
        await clock.run(ob.drain())
    times = [t for t, _, _ in rec.runs]
    assert times[0] == 0.0 and all(b - a >= 1.05 for a, b in zip(times, times[1:])), times
    assert rec.runs[-1][2] == 3  # and the last state is shown


async def test_groups_stay_within_20_requests_a_minute_even_with_bursts(clock: FakeClock) -> None:
    rec = Recorder(clock)
    pace = Pace(interval=3.05, burst=3, per_minute=20)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        for i in range(40):
            ob.submit("g", i, rec.action(str(i)), priority=Priority.SEND, pace=pace)
        await clock.run(ob.drain(), limit=1000)
    times = [t for t, _, _ in rec.runs]
    assert times[:3] == [0.0, 0.0, 0.0]
    assert all(sum(1 for t in times if start <= t < start + 60.0) <= 20 for start in times)


async def test_a_flood_of_sends_does_not_starve_a_live_replys_edits(clock: FakeClock) -> None:
    """20 notices queued for the owner's chat while a reply streams: the reply's edits go
    on, at worst every other request (two pace intervals), and every notice goes out."""
    rec = Recorder(clock)
    pace = Pace(interval=1.05, burst=3)
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        rec.state["reply"] = 0
        ob.submit("owner", "reply", rec.action("reply"), priority=Priority.SEND, pace=pace)
        await clock.settle()
        for i in range(20):
            ob.submit("owner", ("notice", i), rec.action(f"notice{i}"), priority=Priority.SEND, pace=pace)
        for step in range(1, 61):  # the model keeps streaming for 15 s
            rec.state["reply"] = step
            ob.submit("owner", "reply", rec.action("reply"), pace=pace)
            await clock.advance(0.25)
        await clock.run(ob.drain())
    edits = [t for t, label, _ in rec.runs if label == "reply"]
    gaps = [b - a for a, b in zip(edits, edits[1:])]
    assert max(gaps) <= 2 * 1.05 + 1e-9, gaps
    assert len([label for _, label, _ in rec.runs if label.startswith("notice")]) == 20
    assert [s for _, label, s in rec.runs if label == "reply"][-1] == 60  # the newest text


async def test_a_best_effort_notice_never_takes_the_slot_of_an_answer_waiting_behind_it(clock: FakeClock) -> None:
    """A burst in a paced chat: answer 1 goes, notice 2 waits for the next slot, and answer 2
    arrives meanwhile: the slot is the answer's, the notice is dropped unsent (and told)."""
    rec = Recorder(clock)
    dropped: list[str] = []
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("c", "answer1", rec.action("answer1"), priority=Priority.SEND)
        await clock.settle()
        ob.submit("c", "notice2", rec.action("notice2"), priority=Priority.SEND, best_effort=True,
                  on_drop=lambda: dropped.append("notice2"))
        await clock.advance(0.3)
        ob.submit("c", "answer2", rec.action("answer2"), priority=Priority.SEND)
        await clock.run(ob.drain())
    assert [(t, label) for t, label, _ in rec.runs] == [(0.0, "answer1"), (1.0, "answer2")]
    assert dropped == ["notice2"]


async def test_a_best_effort_notice_goes_when_no_message_waits_at_its_turn(clock: FakeClock) -> None:
    """A slow answer: nothing else of the chat waits when the notice's turn comes, so it is
    sent (it is what tells the user their message was taken)."""
    rec = Recorder(clock)
    dropped: list[str] = []
    async with Outbox(clock=clock, sleep=clock.sleep) as ob:
        ob.submit("c", "answer1", rec.action("answer1"), priority=Priority.SEND)
        await clock.settle()
        ob.submit("c", "notice2", rec.action("notice2"), priority=Priority.SEND, best_effort=True,
                  on_drop=lambda: dropped.append("notice2"))
        ob.submit("c", "edit1", rec.action("edit1"), priority=Priority.EDIT)  # the answer streams on
        await clock.run(ob.drain())
    assert [label for _, label, _ in rec.runs] == ["answer1", "notice2", "edit1"]
    assert dropped == []
