"""The prompt-cache layout (LoopConfig.volatile_in_tail, on by default) through the whole app
and the strict fake: only the stable block stays in the system; the clock, today's log and
the pinned goal ride after the conversation's cache breakpoint; today's log is shown as of the
conversation's start (workspace.context.LogCutoffs), so it does not grow with every run; with
all that, every request after the first reads nearly all of its prompt from cache (the fake's
prompt-cache simulation, tests/fakes/anthropic_usage.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from agent_core.risk import Scope
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_script import context_tail, is_context_tail, user_texts
from tests.fakes.anthropic_usage import PromptCache
from tests.fakes.recording_adapter import private
from workspace.context import LogCutoffs, build_context
from workspace.daily_log import append_run_entry


def _log_part(body: dict) -> str:
    tail = context_tail(body)
    return tail.partition("## Today's log")[2]


async def _ask(app, adapter, text: str, n: int) -> None:  # noqa: ANN001
    await adapter.say(private(OWNER_ID, text))
    await adapter.wait_for(lambda: len(adapter.closed_replies()) == n, timeout=15)
    await app.conversations.lanes.drain()


async def test_growing_daily_log_and_moving_clock_keep_the_conversation_cached(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        for i in range(5):
            await _ask(app, adapter, f"question {i} " + "words " * 200, i + 1)
        log = (app.settings.workspace_dir / "memory" / f"{datetime.now(UTC).date()}.md").read_text()
        assert log.count("asked: question") == 5  # the file kept growing
        bodies = [r.json for r in fake_api.requests]
        assert all(r.status == 200 for r in fake_api.requests)  # the strict fake took each
        for body in bodies:
            assert len(body["system"]) == 1 and body["system"][0]["cache_control"]
            last = body["messages"][-1]["content"]
            assert is_context_tail(last[-1]) and "Current date and time" in last[-1]["text"]
            assert "cache_control" in last[-2] and "cache_control" not in last[-1]
        # From the second run on, the prompt's copy of today's log no longer grows: the runs
        # since the conversation began are in the conversation itself.
        assert len({_log_part(b) for b in bodies[2:]}) == 1
        assert "question 1" not in _log_part(bodies[-1])
        cache = PromptCache()
        usages = [cache.account(b) for b in bodies]
        for u in usages[1:]:
            total = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
            assert u.cache_read_input_tokens / total >= 0.8, u


async def test_after_new_the_prompt_shows_todays_log_of_the_ended_conversation(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await _ask(app, adapter, "plan the garden party", 1)
        await _ask(app, adapter, "and the music", 2)
        assert "garden party" not in _log_part(fake_api.requests[-1].json)  # in the conversation
        await adapter.say(private(OWNER_ID, "/new"))
        await adapter.wait_for(lambda: any("fresh session" in t for _, t in adapter.notices), timeout=15)
        await _ask(app, adapter, "what did we decide today?", 3)
        body = fake_api.requests[-1].json
        assert user_texts(body) == ["what did we decide today?"]  # the old turns are gone...
        assert "garden party" in _log_part(body) and "and the music" in _log_part(body)  # ...the log is not


def test_todays_log_is_shown_as_it_was_when_the_conversation_began(tmp_path) -> None:
    morning = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    append_run_entry(tmp_path, "main", morning, "Ana", "earlier question", "answered")
    cutoffs = LogCutoffs(tmp_path)
    start = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    texts = []
    for minute in range(3):
        now = start.replace(minute=minute * 5)
        built = build_context(tmp_path, "main", Scope.MAIN, now, log_upto=cutoffs.cutoff("main", now))
        texts.append(built.volatile.partition("## Today's log")[2])
        # Stamped in the same second as the conversation began: bytes, not times, decide.
        append_run_entry(tmp_path, "main", now, "Ana", f"talk {minute}", "done")
    assert "earlier question" in texts[0] and "talk" not in texts[0]
    assert texts[1] == texts[2] and "talk" not in texts[2] and "earlier question" in texts[2]
    assert "later entries are about this conversation" in texts[2]
    cutoffs.forget("main")  # /new: the whole log again
    now = start.replace(minute=30)
    again = build_context(tmp_path, "main", Scope.MAIN, now, log_upto=cutoffs.cutoff("main", now)).volatile
    assert all(f"talk {m}" in again for m in range(3)) and "later entries" not in again
    # A log rewritten shorter, or a new day, starts over.
    path = tmp_path / "memory" / "2026-11-23.md"
    path.write_text("# 2026-11-23\n")
    assert cutoffs.cutoff("main", now) == path.stat().st_size
    assert cutoffs.cutoff("main", datetime(2026, 11, 24, 8, 0, tzinfo=UTC)) == 0
