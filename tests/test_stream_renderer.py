"""The streaming reply renderer against a strict recording transport on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.errors import DeliveryError, DeliveryUnknown, RateLimited
from adapters.outbox import Outbox, Priority
from adapters.render import ChunkSpec, plan_chunks, render_markdown, utf16_len
from adapters.stream import StreamRenderer
from agent_core.events import (
    ApprovalRequested,
    ApprovalResolved,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    Usage,
)
from agent_core.risk import Risk
from tests.fakes.transport import FakeClock, FakeTransport, ProbingTransport

TELEGRAM = ChunkSpec.create(4096, "utf16", renders_markdown=False)

ANSWER = (
    "Here is the **plan** for today's work, with a few `inline` bits and details.\n\n"
    + "\n\n".join(
        f"{i}. Step {i}: check the _config_, run the build, read the logs and note results."
        for i in range(1, 38)
    )
)


class Chat:
    """One chat: fake clock, recording transport, shared outbox."""

    def __init__(self, **transport: Any) -> None:
        self.clock = FakeClock()
        self.t = FakeTransport(self.clock, **transport)
        self.outbox = Outbox(clock=self.clock, sleep=self.clock.sleep)
        self.deliveries: list[tuple[int, str, str, bool]] = []

    def renderer(self, **kw: Any) -> StreamRenderer:
        async def on_delivery(part: int, mid: str, text: str, final: bool) -> None:
            self.deliveries.append((part, mid, text, final))

        return StreamRenderer(
            self.t, self.outbox, clock=self.clock, sleep=self.clock.sleep, on_delivery=on_delivery, **kw
        )

    async def stream(self, r: StreamRenderer, text: str, chars: int = 30, every: float = 0.03) -> None:
        for i in range(0, len(text), chars):
            await r.feed(TextDelta(text[i : i + chars]))
            await self.clock.advance(every)

    async def finish(self, r: StreamRenderer, text: str = "") -> None:
        await r.feed(RunFinished("run", "end_turn", 1, Usage(), text))
        result = await self.clock.run(r.finish())
        await r.aclose()
        assert result.ok, result

    def sent_and_edited(self) -> list[float]:
        return [c.at for c in self.t.calls if c.kind in ("send", "edit") and c.error is None]

    def paced(self, interval: float) -> bool:
        """Every successful request at least `interval` after the previous one."""
        times = self.sent_and_edited()
        return all(b - a >= interval - 1e-9 for a, b in zip(times, times[1:]))


@pytest.fixture
async def chat() -> AsyncIterator[Chat]:
    c = Chat()
    yield c
    await c.outbox.aclose()


def tool_started(call_id: str = "c1", command: str = "ls -la") -> ToolStarted:
    return ToolStarted(call_id, "exec", {"command": command}, Risk.EXEC)


async def test_3000_char_answer_streams_in_one_message_with_paced_edits(chat: Chat) -> None:
    answer = ANSWER[:3000]
    r = chat.renderer()
    await r.start()
    await chat.stream(r, answer)  # 100 deltas of 30 chars over 3 s
    await chat.finish(r, answer)

    sends, edits = chat.t.of("send"), chat.t.of("edit")
    assert len(sends) == 1 and sends[0].at == 0.0  # right after the first 30 characters
    assert 1 <= len(edits) <= 4
    assert chat.paced(1.0), chat.sent_and_edited()
    assert chat.t.texts() == [render_markdown(answer).text]
    assert chat.t.not_modified == 0


async def test_growing_edits_carry_the_latest_text_and_never_repeat_a_payload(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, ANSWER[:2000], chars=7, every=0.01)
    await chat.finish(r)
    payloads = [(c.text, c.entities) for c in chat.t.calls if c.kind in ("send", "edit")]
    assert len(payloads) == len(set(payloads))
    lengths = [len(text) for text, _ in payloads]
    assert lengths == sorted(lengths)


async def test_short_answer_first_message_after_one_second(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(TextDelta("Hi"))
    await chat.clock.advance(0.99)
    assert chat.t.of("send") == []
    await chat.clock.advance(0.02)
    assert [c.text for c in chat.t.of("send")] == ["Hi"]
    await chat.finish(r)
    assert chat.t.texts() == ["Hi"] and chat.t.of("edit") == []


async def test_typing_refreshes_until_the_first_message_exists(chat: Chat) -> None:
    r = chat.renderer()
    await r.start()
    await chat.clock.advance(12.0)  # the model is thinking
    assert [c.at for c in chat.t.of("typing")] == [0.0, 5.0, 10.0]
    await chat.stream(r, "x" * 40)
    await chat.clock.advance(20.0)
    assert len(chat.t.of("typing")) == 3
    await chat.finish(r)


async def test_10k_answer_with_code_block_across_4096_continues_in_new_messages(chat: Chat) -> None:
    prose = " ".join(f"Sentence {i} explains a detail of the design." for i in range(55))
    code = "\n".join(f"    value_{i} = transform(item_{i})  # 😀 step {i}" for i in range(200))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{prose}"
    assert len(answer) > 10_000
    r = chat.renderer()
    await chat.stream(r, answer, chars=40, every=0.02)
    await chat.finish(r)

    expected = plan_chunks(answer, TELEGRAM)
    assert chat.t.texts() == [p.text for p in expected]
    assert [chat.t.messages[m].entities for m in chat.t.order] == [p.entities for p in expected]
    assert all(utf16_len(text) <= 4096 for text in chat.t.texts())
    # The code block crosses a message boundary: pre closed at the end, reopened at start.
    msgs = [chat.t.messages[m] for m in chat.t.order]
    assert any(
        any(e.type == "pre" and e.end == utf16_len(a.text) for e in a.entities)
        and any(e.type == "pre" and e.offset == 0 and e.language == "python" for e in b.entities)
        for a, b in zip(msgs, msgs[1:])
    )


async def test_closed_chunk_is_never_edited_after_its_final_text(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, ANSWER * 4, chars=50, every=0.02)
    await chat.finish(r)
    assert len(chat.t.order) >= 3
    for mid in chat.t.order:
        shown = [c.text for c in chat.t.calls if c.message_id == mid and c.kind in ("send", "edit")]
        final = chat.t.messages[mid].text
        assert shown.index(final) == len(shown) - 1  # nothing after the final text
    assert chat.t.not_modified == 0


async def test_emoji_counted_in_utf16_and_pairs_never_split(chat: Chat) -> None:
    answer = "😀" * 5000  # 10,000 UTF-16 units, no break opportunity
    r = chat.renderer()
    await chat.stream(r, answer, chars=100, every=0.01)
    await chat.finish(r)
    texts = chat.t.texts()
    assert all(utf16_len(t) <= 4096 for t in texts)
    assert "".join(texts) == answer  # every piece is whole emoji: nothing lost or broken


async def test_429_during_edit_never_duplicates(chat: Chat) -> None:
    chat.t.fail[("edit", 2)] = RateLimited(2.0)
    answer = ANSWER[:3000]
    r = chat.renderer()
    await chat.stream(r, answer)
    await chat.finish(r, answer)

    assert len(chat.t.of("send")) == 1 and len(chat.t.order) == 1
    assert chat.t.texts() == [render_markdown(answer).text]
    limited = next(c for c in chat.t.calls if c.error == "RateLimited")
    after = [c.at for c in chat.t.calls if c.at > limited.at and c.kind != "typing"]
    assert after and min(after) >= limited.at + 2.0


async def test_429_on_first_send_never_duplicates(chat: Chat) -> None:
    chat.t.fail[("send", 1)] = RateLimited(3.0)
    r = chat.renderer()
    await chat.stream(r, ANSWER[:600])
    await chat.finish(r)
    assert len(chat.t.of("send")) == 1 and chat.t.of("send")[0].at >= 3.0
    assert chat.t.texts() == [render_markdown(ANSWER[:600]).text]


async def test_repeated_429_across_chunks_keeps_every_word_once(chat: Chat) -> None:
    for n in (1, 3, 5):
        chat.t.fail[("edit", n)] = RateLimited(2.0)
    chat.t.fail[("send", 2)] = RateLimited(2.0)
    answer = ANSWER * 3
    r = chat.renderer()
    await chat.stream(r, answer, chars=45, every=0.02)
    await chat.finish(r)
    assert chat.t.texts() == [p.text for p in plan_chunks(answer, TELEGRAM)]
    assert len(chat.t.of("send")) == len(chat.t.order)


async def test_formatting_rejected_falls_back_to_plain_text() -> None:
    chat = Chat(reject_entities=True)
    answer = "Some **bold** text and `code`, long enough to be sent at once."
    r = chat.renderer()
    await chat.stream(r, answer)
    await chat.finish(r)
    msg = chat.t.messages[chat.t.order[0]]
    assert msg.text == render_markdown(answer).text and msg.entities == ()
    await chat.outbox.aclose()


async def test_tool_status_lines_shown_during_run_and_removed_at_the_end(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, "Let me look at the directory for you.")
    await r.feed(tool_started("c1", "ls -la"))
    await chat.clock.advance(1.0)
    assert chat.t.texts()[0].endswith("\n\n⚙️ exec: ls -la")
    await r.feed(ToolFinished("c1", "exec", False, "a\nb", 0.4))
    await r.feed(tool_started("c2", "cat missing"))
    await r.feed(ToolFinished("c2", "exec", True, "cat: missing: No such file\nmore", 0.1))
    await chat.clock.advance(1.0)
    assert chat.t.texts()[0].endswith("\n\n✓ exec (0.4 s)\n✗ exec: cat: missing: No such file")
    await r.feed(TurnEnded(1))
    await chat.stream(r, "Found it.")
    await chat.finish(r)
    assert chat.t.texts() == ["Let me look at the directory for you.\n\nFound it."]


async def test_tool_before_any_text_shows_status_after_one_second(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(tool_started())
    await chat.clock.advance(1.0)
    assert chat.t.texts() == ["⚙️ exec: ls -la"]
    await chat.stream(r, "The directory holds three files.")
    await chat.finish(r)
    assert chat.t.texts() == ["The directory holds three files."]


async def test_approval_wait_shown_in_status_line(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(tool_started("c1", "rm -rf build"))
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    await r.feed(ApprovalRequested("a1", "c1", "exec", Risk.EXEC, "rm -rf build", expires))
    await chat.clock.advance(1.0)
    assert chat.t.texts() == ["⏸ exec: waiting for approval"]
    await r.feed(ApprovalResolved("a1", "deny", "telegram:1"))
    await chat.clock.advance(1.0)
    assert chat.t.texts() == ["✗ exec: not approved (deny)"]
    await chat.finish(r)


async def test_granted_approval_returns_to_running_line(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(tool_started("c1", "make deploy"))
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    await r.feed(ApprovalRequested("a1", "c1", "exec", Risk.EXEC, "make deploy", expires))
    await r.feed(ApprovalResolved("a1", "once", "telegram:1"))
    await chat.clock.advance(1.0)
    assert chat.t.texts() == ["⚙️ exec: make deploy"]
    await chat.finish(r)


async def test_empty_answer_gets_a_no_answer_message(chat: Chat) -> None:
    r = chat.renderer()
    await r.start()
    await chat.finish(r)
    assert chat.t.texts() == ["(no answer)"]


async def test_empty_answer_after_tools_replaces_status_message(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(tool_started())
    await chat.clock.advance(1.5)
    await r.feed(ToolFinished("c1", "exec", False, "", 0.2))
    await chat.finish(r)
    assert chat.t.texts() == ["(no answer)"] and len(chat.t.of("send")) == 1


async def test_run_failed_shows_the_error_after_partial_text(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, "Working on the answer, here is the first part")
    await r.feed(RunFailed("run", "The model is overloaded; try again in a minute."))
    await chat.clock.run(r.finish())
    assert chat.t.texts() == [
        "Working on the answer, here is the first part\n\n⚠️ The model is overloaded; try again in a minute."
    ]
    await r.aclose()


async def test_run_failed_without_text_shows_only_the_error(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(RunFailed("run", "Stopped after 3 malformed replies."))
    await chat.clock.run(r.finish())
    assert chat.t.texts() == ["⚠️ Stopped after 3 malformed replies."]
    await r.aclose()


async def test_on_delivery_reports_every_part_and_marks_final(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, ANSWER * 3, chars=60, every=0.02)
    await chat.finish(r)
    assert len(chat.t.order) >= 2
    for index, mid in enumerate(chat.t.order):
        reports = [(m, text, final) for part, m, text, final in chat.deliveries if part == index]
        assert all(m == mid for m, _, _ in reports)
        assert [final for _, _, final in reports] == [False] * (len(reports) - 1) + [True]
        assert reports[-1][1] == chat.t.messages[mid].text


async def test_final_edit_skipped_when_last_edit_already_showed_final_text(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, "A complete answer that is long enough to send.")
    await chat.clock.advance(5.0)  # the growth edit at 1.0 s already shows everything
    assert len(chat.t.of("edit")) == 1
    await chat.finish(r)
    assert len(chat.t.of("edit")) == 1 and chat.deliveries[-1][3] is True


async def test_run_finished_text_fills_a_tail_the_stream_missed(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, "The first half of the answer, streamed")
    await chat.finish(r, "The first half of the answer, streamed, and the tail.")
    assert chat.t.texts() == ["The first half of the answer, streamed, and the tail."]


async def test_turns_are_separated_by_a_paragraph(chat: Chat) -> None:
    r = chat.renderer()
    await r.feed(TextDelta("Checking."))
    await r.feed(TurnEnded(1))
    await r.feed(TextDelta("Done."))
    await chat.finish(r)
    assert chat.t.texts() == ["Checking.\n\nDone."]


async def test_message_deleted_by_user_is_left_alone(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, ANSWER[:300])
    chat.t.user_deletes(chat.t.order[0])
    await chat.stream(r, ANSWER[300:600])
    result = await chat.clock.run(r.finish())
    assert chat.t.texts() == [] and result.parts[0].state == "gone"
    await r.aclose()


async def test_transient_errors_retried_then_given_up(chat: Chat) -> None:
    chat.t.fail[("send", 1)] = DeliveryError("network")
    r = chat.renderer()
    await chat.stream(r, ANSWER[:100])
    await chat.finish(r)
    assert chat.t.texts() == [render_markdown(ANSWER[:100]).text]

    chat2 = Chat()
    for n in (1, 2, 3):
        chat2.t.fail[("send", n)] = DeliveryError("down")
    r2 = chat2.renderer()
    await chat2.stream(r2, ANSWER[:100])
    await r2.feed(RunFinished("run", "end_turn", 1, Usage(), ""))
    result = await chat2.clock.run(r2.finish())
    assert not result.ok and result.parts[0].state == "failed"
    await r2.aclose()
    await chat2.outbox.aclose()


async def test_cancelled_consumer_propagates_and_leaves_reply_final(chat: Chat) -> None:
    r = chat.renderer()
    gate = asyncio.Event()

    async def consume() -> None:
        async with r:
            await r.feed(TextDelta("Partial answer before the user pressed stop"))
            await gate.wait()  # the run is cancelled here

    task = asyncio.ensure_future(consume())
    await chat.clock.advance(1.0)
    task.cancel()
    await chat.clock.advance(2.0)
    assert task.cancelled()
    assert chat.t.texts() == ["Partial answer before the user pressed stop\n\n⏹ stopped"]


async def test_discord_streams_markdown_source_with_fences_balanced() -> None:
    chat = Chat(limit_units=2000, unit="chars", min_edit_interval_s=1.2, renders_markdown=True)
    code = "\n".join(f"print('line {i}')" for i in range(150))
    answer = f"Intro **bold**.\n\n```python\n{code}\n```\n\nDone."
    r = chat.renderer()
    await chat.stream(r, answer, chars=40, every=0.02)
    await chat.finish(r)
    spec = ChunkSpec.create(2000, "chars", renders_markdown=True)
    assert chat.t.texts() == [p.text for p in plan_chunks(answer, spec)]
    assert all(len(t) <= 2000 and t.count("```") % 2 == 0 for t in chat.t.texts())
    assert all(c.entities == () for c in chat.t.calls)
    assert chat.paced(1.2), chat.sent_and_edited()
    await chat.outbox.aclose()


async def test_outbox_closed_first_does_not_hang_the_renderer(chat: Chat) -> None:
    r = chat.renderer()
    await chat.stream(r, ANSWER[:200])
    await chat.outbox.aclose()  # shutdown order: the adapter's outbox went first
    await chat.stream(r, ANSWER[200:400])
    result = await chat.clock.run(r.finish())
    assert not result.ok
    await r.aclose()


async def test_consumer_error_leaves_an_interrupted_notice(chat: Chat) -> None:
    r = chat.renderer()

    async def consume() -> None:
        async with r:
            await r.feed(TextDelta("An answer that is cut short by a bug"))
            raise ValueError("event source broke")

    with pytest.raises(ValueError):
        await chat.clock.run(consume())
    assert chat.t.texts() == ["An answer that is cut short by a bug\n\n⚠️ reply interrupted"]


async def test_run_consumes_an_event_stream(chat: Chat) -> None:
    async def events() -> AsyncIterator[Any]:
        for word in ANSWER[:400].split(" "):
            yield TextDelta(word + " ")
            await chat.clock.sleep(0.01)
        yield RunFinished("run", "end_turn", 1, Usage(), "")

    result = await chat.clock.run(chat.renderer().run(events()))
    assert result.ok and chat.t.texts() == [render_markdown(ANSWER[:400]).text]
    assert result.message_ids == chat.t.order


async def test_slow_platform_one_request_in_flight_and_latest_text_wins() -> None:
    chat = Chat(latency=0.7)  # each request takes 0.7 s of fake time
    r = chat.renderer()
    await chat.stream(r, ANSWER * 2, chars=25, every=0.01)
    await chat.finish(r)
    assert chat.t.max_in_flight == 1
    assert chat.t.texts() == [p.text for p in plan_chunks(ANSWER * 2, TELEGRAM)]
    assert chat.t.not_modified == 0
    await chat.outbox.aclose()


async def test_platform_rejecting_length_gets_shortened_text_not_nothing(chat: Chat) -> None:
    # Our measure and the platform's disagree (a platform quirk): deliver most of it.
    r = chat.renderer(spec=ChunkSpec.create(8000, "utf16", renders_markdown=False))
    await chat.stream(r, "word " * 1400, chars=500, every=0.01)
    await chat.finish(r)
    (text,) = chat.t.texts()
    assert text.endswith("…") and utf16_len(text) <= 4096


async def test_outbox_closed_mid_request_releases_the_renderer() -> None:
    chat = Chat(latency=5.0)
    r = chat.renderer()
    await chat.stream(r, ANSWER[:100])
    assert chat.t.in_flight == 1  # the first send is on the wire
    await chat.outbox.aclose()
    result = await chat.clock.run(r.finish())
    assert not result.ok
    await r.aclose()


# -- a send whose answer was lost ---------------------------------------------------------


async def test_lost_send_answer_is_found_and_edited_on_never_resent() -> None:
    chat = Chat()
    chat.t = ProbingTransport(chat.clock, lose_answer={1})
    try:
        r = chat.renderer()
        await chat.stream(r, ANSWER[:1500])
        await chat.finish(r, ANSWER[:1500])
    finally:
        await chat.outbox.aclose()
    assert chat.t.texts() == [render_markdown(ANSWER[:1500]).text]  # once, complete
    assert len(chat.t.of("send")) == 1 and chat.t.probes == 1
    assert chat.paced(1.0)


async def test_lost_send_answer_without_a_probe_is_given_up_not_duplicated(chat: Chat) -> None:
    chat.t.lose_answer = {1}
    r = chat.renderer()
    await chat.stream(r, ANSWER[:1500])
    await r.feed(RunFinished("run", "end_turn", 1, Usage(), ANSWER[:1500]))
    result = await chat.clock.run(r.finish())
    await r.aclose()
    assert not result.ok and result.parts[0].state == "failed"
    assert len(chat.t.of("send")) == 1 and len(chat.t.texts()) == 1  # no second copy


async def test_lost_edit_answer_is_simply_edited_again(chat: Chat) -> None:
    chat.t.fail[("edit", 1)] = DeliveryUnknown("read timeout")
    r = chat.renderer()
    await chat.stream(r, ANSWER[:1500])
    await chat.finish(r, ANSWER[:1500])
    assert chat.t.texts() == [render_markdown(ANSWER[:1500]).text]
    assert len(chat.t.of("send")) == 1


async def test_a_finished_turn_shows_its_text_at_once_and_the_reply_closes_without_waiting(chat: Chat) -> None:
    """A short instant answer goes out when its model turn ends (not after the run's
    bookkeeping), and closing the reply then waits for no pace: it needs no request."""
    r = chat.renderer()
    await r.feed(TextDelta("Short."))
    await r.feed(TurnEnded(1))
    await chat.clock.settle()
    assert [(c.at, c.text) for c in chat.t.of("send")] == [(0.0, "Short.")]
    await chat.clock.advance(0.3)  # the run's bookkeeping
    await r.feed(RunFinished("run", "end_turn", 1, Usage(), "Short."))
    result = await chat.clock.run(r.finish())
    await r.aclose()
    assert result.ok and chat.clock.now == 0.3  # not held until the message's next edit slot
    assert chat.deliveries[-1][3] is True  # recorded as final
    assert len(chat.t.calls) == len(chat.t.of("send")) + len(chat.t.of("typing"))


async def test_pairing_notices_flooding_the_owners_chat_do_not_freeze_the_streamed_reply(chat: Chat) -> None:
    """20 notices queued for the same chat while the reply streams: its message keeps
    growing, an edit at least every two pace intervals, and every notice goes out."""
    notices: list[float] = []

    async def notice() -> bool:
        await chat.t.send("🔔 someone wants to pair", [])
        notices.append(chat.clock())
        return True

    r = chat.renderer()
    await chat.stream(r, ANSWER[:120], every=0.01)  # the reply's first message is out
    for i in range(20):
        chat.outbox.submit(chat.t.chat_key, ("notice", i), notice, priority=Priority.SEND, interval=1.0)
    await chat.stream(r, ANSWER[120:3000], chars=30, every=0.15)  # ~14 s of streaming
    await chat.finish(r, ANSWER[:3000])
    await chat.clock.run(chat.outbox.drain())
    reply_id = chat.t.of("send")[0].message_id
    edits = [c.at for c in chat.t.of("edit") if c.message_id == reply_id]
    gaps = [b - a for a, b in zip(edits, edits[1:])]
    assert len(edits) >= 6 and max(gaps) <= 2 * chat.t.min_edit_interval_s + 1e-9, edits
    assert len(notices) == 20
