"""Sessions that wedge — every later message failing until /new — reproduced through the real
anthropic SDK against the strict fake Messages API, and pinned.

Each attack leaves something in the stored conversation (or the service refuses it); the test
then sends the next message of the same session and requires an accepted request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_core.events import RunFailed, RunFinished, TextDelta, ToolStarted
from agent_core.loop import LoopConfig
from agent_core.text import is_clean
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Error, Reply, Text, ToolUse, reply_text, reply_tools
from tests.harness import CoreHarness, make_harness

# The `db_url` fixture, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


def finished(events: list) -> RunFinished:
    assert isinstance(events[-1], RunFinished), events[-1]
    return events[-1]


def tool_blocks(body: dict, kind: str) -> list[dict]:
    return [b for m in body["messages"] for b in m["content"] if b.get("type") == kind]


@pytest.fixture
async def harness_factory(tmp_path: Path) -> AsyncIterator:
    made: list[CoreHarness] = []

    async def make(fake: FakeAnthropic, **kwargs) -> CoreHarness:  # noqa: ANN003
        harness = await make_harness(fake, tmp_path / str(len(made)), **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        await harness.llm.aclose()
        await harness.storage.aclose()


# ---- a run that ends right after a huge tool turn ----------------------------------------------


async def test_huge_tool_turn_at_the_turn_budget_never_orphans_its_results(harness_factory) -> None:
    """30 parallel read-file-like calls at the output cap, then the turn budget ends the run:
    the stored conversation ends with 30 × 16 kB of results, over the history budget. Before,
    the next request sent that tool_result message without its tool_use: a 400 forever."""
    with FakeAnthropic() as fake:
        core = await harness_factory(fake, config=LoopConfig(model="m", max_turns=1, history_budget_chars=100_000))
        fake.script(reply_tools(*[ToolUse("big", {"count": 3000 + i}) for i in range(30)]))
        done = finished(await core.run("read all thirty files"))
        assert done.stop_reason == "max_turns" and "Stopped after 1 steps" in done.text
        fake.script(reply_text("Here is the summary."))
        assert finished(await core.run("and now?")).text == "Here is the summary."
        body = fake.requests[-1].json
        assert fake.requests[-1].status == 200
        uses, results = tool_blocks(body, "tool_use"), tool_blocks(body, "tool_result")
        assert len(uses) == len(results) == 30, "the huge turn is sent whole, shrunk to fit"
        assert all("characters of this result were cut" in r["content"] for r in results)
        assert len(json.dumps(body["messages"])) < 110_000


async def test_tool_turns_growing_within_one_run_stay_inside_the_context_window(harness_factory) -> None:
    # Three turns of 30 big results in one run: each request is windowed, so none is refused.
    with FakeAnthropic(context_window_tokens=40_000) as fake:
        core = await harness_factory(fake, config=LoopConfig(model="m", history_budget_chars=100_000))
        for turn in range(3):
            fake.script(reply_tools(*[ToolUse("big", {"count": 3000 + 30 * turn + i}) for i in range(30)]))
        fake.script(reply_text("done reading"))
        assert finished(await core.run("read ninety files")).text == "done reading"
        assert [r.status for r in fake.requests] == [200, 200, 200, 200]


# ---- lone surrogates and NUL ----------------------------------------------------------------------


async def test_lone_surrogate_streamed_by_the_model_never_wedges_the_session(core: CoreHarness) -> None:
    # Half an emoji alone, and a whole one split across two stream chunks.
    core.fake.script(
        Reply(Text("broken \ud83d here", chunk_size=8), Text("whole \U0001f600 smile", chunk_size=7)),
        reply_tools(ToolUse("binary", {"text": "input \ud83d"})),
        reply_text("ok"),
    )
    done = finished(await core.run("hi \udc00 from a split update"))
    assert "broken \ufffd here" in done.text and "whole \U0001f600 smile" in done.text
    events = await core.run("use the tool")
    started = [e for e in events if isinstance(e, ToolStarted)]
    assert started[0].input == {"text": "input \ufffd"}
    core.fake.script(reply_text("still fine"))
    assert finished(await core.run("next")).text == "still fine"
    assert all(r.status == 200 for r in core.fake.requests)
    sent = core.fake.requests[-1].json["messages"]
    assert is_clean(sent) and "\ufffd" in json.dumps(sent, ensure_ascii=False)


async def test_text_deltas_are_clean_as_they_stream(core: CoreHarness) -> None:
    core.fake.script(Reply(Text("a\ud83d\ude00b \ud83d", chunk_size=2)))
    events = await core.run("hi")
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == "a\U0001f600b \ufffd" == finished(events).text


async def test_nul_in_tool_output_is_stored_and_sent_safely(db_url: str, harness_factory) -> None:
    """PostgreSQL refuses NUL in text and JSON: a tool printing one (a binary file) failed the
    run there, and the conversation could not be stored."""
    with FakeAnthropic() as fake:
        core = await harness_factory(fake, db_url=db_url)
        fake.script(reply_tools(ToolUse("binary", {"text": "x"})), reply_text("read it"))
        done = finished(await core.run("cat the binary \x00 file"))
        assert done.text == "read it"
        (result,) = tool_blocks(fake.requests[1].json, "tool_result")
        assert result["content"] == "head\u2400x\u2400tail"
        fake.script(reply_text("next works"))
        assert finished(await core.run("next")).text == "next works"
        assert all(r.status == 200 for r in fake.requests)
        stored = json.dumps(await core.storage.load_transcript("main"), ensure_ascii=False)
        assert "\x00" not in stored and "head\u2400x\u2400tail" in stored and "binary \u2400 file" in stored
        run_id = finished(await _one_tool_run(core, fake)).run_id
        (call,) = await core.storage.tool_calls_for_run(run_id)
        assert call.output == "head\u2400y\u2400tail" and call.is_error is False


async def _one_tool_run(core: CoreHarness, fake: FakeAnthropic) -> list:
    fake.script(reply_tools(ToolUse("binary", {"text": "y"})), reply_text("again"))
    return await core.run("once more")


# ---- duplicate tool_use ids ---------------------------------------------------------------------


async def test_repeated_tool_id_in_one_message_runs_both_calls_and_never_wedges(core: CoreHarness) -> None:
    core.fake.script(
        reply_tools(ToolUse("big", {"count": 1}, id="toolu_dup"), ToolUse("big", {"count": 2}, id="toolu_dup")),
        reply_text("both read"),
    )
    events = await core.run("two reads")
    assert finished(events).text == "both read"
    assert [e.call_id for e in events if isinstance(e, ToolStarted)] == ["toolu_dup", "toolu_dup_2"]
    second = core.fake.requests[1]
    assert second.status == 200
    assert [b["id"] for b in tool_blocks(second.json, "tool_use")] == ["toolu_dup", "toolu_dup_2"]
    results = {b["tool_use_id"]: b["content"] for b in tool_blocks(second.json, "tool_result")}
    assert results == {"toolu_dup": "line 0\n", "toolu_dup_2": "line 0\nline 1\n"}
    calls = await core.storage.tool_calls_for_run(finished(events).run_id)
    assert [(c.call_id, c.output) for c in calls] == [("toolu_dup", "line 0\n"), ("toolu_dup_2", "line 0\nline 1\n")]
    core.fake.script(reply_text("fine"))
    assert finished(await core.run("next")).text == "fine"


async def test_endpoint_numbering_tool_ids_per_response_never_wedges(harness_factory) -> None:
    """Some Anthropic-compatible endpoints call every first tool use "toolu_1": stored, that
    hit the tool_calls primary key, then the API's "ids must be unique" rule forever."""
    with FakeAnthropic(tool_ids="numbered") as fake:
        core = await harness_factory(fake)
        run_ids = []
        for n in range(3):
            fake.script(reply_tools(ToolUse("big", {"count": n + 1})), reply_text(f"answer {n}"))
            run_ids.append(finished(await core.run(f"question {n}")).run_id)
        assert all(r.status == 200 for r in fake.requests)
        assert [r.served.blocks[0].id for r in fake.requests[::2]] == ["toolu_1"] * 3  # the attack happened
        sent = [b["id"] for b in tool_blocks(fake.requests[-1].json, "tool_use")]
        assert sent == ["toolu_1", "toolu_1_2", "toolu_1_3"]
        for n, run_id in enumerate(run_ids):
            (call,) = await core.storage.tool_calls_for_run(run_id)
            assert call.output == "".join(f"line {i}\n" for i in range(n + 1))


# ---- the general guard: a refused conversation is repaired, trimmed, retried once ------------


async def test_conversation_the_service_refuses_is_trimmed_and_retried_once(core: CoreHarness) -> None:
    def refuse_poison(body: dict):  # noqa: ANN202
        if "poison" in json.dumps(body["messages"]):
            return Error(400, message="messages.0.content.0: something this service dislikes")
        return reply_text(f"answered with {len(body['messages'])} message(s)")

    core.fake.script(reply_text("noted"))
    finished(await core.run("some poison the service will start refusing"))
    core.fake.responder = refuse_poison
    for attempt in range(2):  # every later message still gets its answer
        done = finished(await core.run(f"a fresh question {attempt}"))
        assert done.text == "answered with 1 message(s)"
        assert [r.status for r in core.fake.requests[-2:]] == [400, 200]


async def test_conversation_refused_twice_ends_with_a_plain_message(core: CoreHarness) -> None:
    core.fake.responder = lambda body: Error(400, message="messages: this service refuses everything")
    failed = (await core.run("hi"))[-1]
    assert isinstance(failed, RunFailed) and failed.kind == "invalid_request"
    assert "refuses everything" in failed.message and "/new" in failed.message
    assert len(core.fake.requests) == 2, "retried exactly once"


async def test_prompt_too_long_is_trimmed_to_fit_end_to_end(harness_factory) -> None:
    with FakeAnthropic() as fake:
        core = await harness_factory(fake)
        for n in range(6):
            fake.script(reply_text(f"answer {n} " + "a" * 4000))
            finished(await core.run(f"question {n} " + "q" * 4000))
        # A smaller model behind the same endpoint: the whole history no longer fits.
        base = _prompt_tokens(fake.requests[0].json)
        fake.context_window_tokens = base + 5_000
        fake.script(reply_text("short enough now"))
        assert finished(await core.run("question 6")).text == "short enough now"
        statuses = [(r.status, r.error) for r in fake.requests[-2:]]
        assert statuses[0][0] == 400 and statuses[0][1].startswith("prompt is too long:")
        assert statuses[1] == (200, None)
        assert "question 6" in json.dumps(fake.requests[-1].json["messages"])
        # The limit it learned holds for later runs: no refused request first.
        fake.script(reply_text("fits at once"))
        assert finished(await core.run("question 7")).text == "fits at once"
        assert fake.requests[-1].status == 200 and fake.requests[-2].status == 200


async def test_message_too_long_even_alone_says_so_and_suggests_new(harness_factory) -> None:
    with FakeAnthropic() as fake:
        core = await harness_factory(fake)
        fake.script(reply_text("hello"))
        finished(await core.run("hi"))
        fake.context_window_tokens = _prompt_tokens(fake.requests[0].json) + 500
        failed = (await core.run("x" * 20_000))[-1]
        assert isinstance(failed, RunFailed) and failed.kind == "invalid_request"
        assert "too long" in failed.message and "/new" in failed.message
        assert [r.status for r in fake.requests[1:]] == [400, 400]


def _prompt_tokens(body: dict) -> int:
    from tests.fakes.anthropic_usage import count_tokens

    return count_tokens(body)
