"""Context compaction over the wire (the real app, python-telegram-bot against the fake Bot API,
the anthropic SDK against the strict fake Messages API): a silent memory flush, then older
turns replaced in what is sent by a summary with the seed's sections; recent turns and tool
pairs kept; nothing dropped from storage; a failed summary loses nothing and is said once."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from agent_core.compaction import (
    FLUSH_PROMPT,
    SECTIONS,
    SUMMARY_HEADER,
    CompactionConfig,
    cut_index,
    normalise_summary,
)
from agent_core.plans import GoalLock
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Error, Stall, ToolUse, context_tail, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)

FACT = "The deploy key lives in vault slot 7."
SUMMARY = "\n".join(
    [
        "## Active task", "- check the remaining items",
        "## Goal", "- every item checked",
        "## Completed actions", "- items 0-20 checked, all fine",
        "## Key decisions", "- check in order, one tool call each",
    ]  # the model left sections out: they are added as '- none'
)
TURNS = 24
# Compaction due on every run (the system prompt alone passes 750 tokens); keep ~3 turns.
DUE = CompactionConfig(context_window_tokens=1000, compact_at=0.75, keep_recent_tokens=2000, timeout_s=30)
NEVER = CompactionConfig(context_window_tokens=10**9)


async def seed(storage: Storage, turns: int = TURNS, session_key: str = "main") -> None:
    """A long recorded session: each turn a request, a tool call, its result and an answer."""
    for i in range(turns):
        await storage.append_message(session_key, None, "user", [{"type": "text", "text": f"Turn {i}: check item {i}. " + "details " * 80}])
        await storage.append_message(session_key, None, "assistant", [
            {"type": "text", "text": f"Checking item {i}."},
            {"type": "tool_use", "id": f"toolu_seed_{i}", "name": "memory_get", "input": {"path": "MEMORY.md"}},
        ])  # fmt: skip
        await storage.append_message(session_key, None, "user", [
            {"type": "tool_result", "tool_use_id": f"toolu_seed_{i}", "content": f"result {i}: " + "ok " * 400},
        ])  # fmt: skip
        await storage.append_message(session_key, None, "assistant", [{"type": "text", "text": f"Item {i} is fine."}])


def sent_text(request_json: dict[str, Any]) -> str:
    return json.dumps(request_json["messages"], ensure_ascii=False)


def first_user_text(request_json: dict[str, Any]) -> str:
    return request_json["messages"][0]["content"][0]["text"]


def assert_pairs_together(messages: list[dict[str, Any]]) -> None:
    for index, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if uses:
            results = [b.get("tool_use_id") for b in messages[index + 1]["content"] if b.get("type") == "tool_result"]
            assert set(uses) <= set(results), f"tool_use {uses} separated from its result"


async def test_compaction_flushes_memory_summarises_with_the_seed_sections_and_keeps_recent_turns(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(ToolUse("memory_write", {"target": "memory", "mode": "append", "text": FACT})),
        reply_text("saved"),
        reply_text(SUMMARY),
        reply_text("Next: item 24."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        storage = h.app.storage
        await seed(storage)
        await storage.set_goal_lock(GoalLock("main", "Check every item.", ("never skip an item",)))
        h.app.agent.compactor.config = DUE
        tg.send_private(OWNER, "what next?")
        await h.says(OWNER, "Next: item 24.")
        flush, flush_2, summary_call, answer = (r.json for r in fake_api.requests[:4])

        # The silent turn: asked to save, its memory_write ran; nothing of it was shown.
        assert FLUSH_PROMPT in sent_text(flush)
        assert FACT in (h.workspace / "MEMORY.md").read_text()
        assert not any("saved" == m.text for m in tg.bot_messages(OWNER))
        # The summary call read the older turns, not the kept ones.
        assert "Turn 0:" in sent_text(summary_call) and "Turn 23:" not in sent_text(summary_call)

        # What was sent: the summary with every seed section, then the newest turns verbatim.
        head = first_user_text(answer)
        assert head.startswith(SUMMARY_HEADER)
        assert all(f"## {s}" in head for s in SECTIONS)
        assert "- none" in head  # the sections the model left out
        sent = sent_text(answer)
        assert "Turn 0:" not in sent and "Turn 23:" in sent and "Turn 22:" in sent
        assert_pairs_together(answer["messages"])
        # The goal lock is not part of what is compacted: it is pinned on every call.
        assert "Check every item." in context_tail(answer)

        # Storage keeps everything; the record says what it covers and the sizes.
        stored = await storage.load_transcript("main")
        assert len(stored) == TURNS * 4 + 2
        assert all(FLUSH_PROMPT not in json.dumps(m) for m in stored)
        latest, attempt = await storage.compaction_state("main")
        assert latest is not None and latest is not None and latest.ok and attempt is not None and attempt.ok
        assert 0 < latest.tokens_after < latest.tokens_before
        assert stored[latest.covered]["content"][0]["text"].startswith("Turn ")

        # The next request is valid and still starts from the summary; the flushed fact is
        # found by memory_search.
        h.app.agent.compactor.config = NEVER
        fake_api.script(reply_tools(ToolUse("memory_search", {"query": "vault slot"})), reply_text("Found it."))
        tg.send_private(OWNER, "where is the deploy key?")
        await h.says(OWNER, "Found it.")
        after = fake_api.requests[-1].json
        assert first_user_text(after).startswith(SUMMARY_HEADER)
        results = [b for b in after["messages"][-1]["content"] if b.get("type") == "tool_result"]
        assert "vault slot 7" in json.dumps(results)


async def test_failed_summary_call_loses_nothing_and_tells_the_user_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("nothing to save"), Error(500), reply_text("Answer anyway."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        storage = h.app.storage
        await seed(storage)
        # Due now; a retry would need the context to grow by 100 windows (never, here).
        h.app.agent.compactor.config = CompactionConfig(
            context_window_tokens=1000, keep_recent_tokens=2000, retry_growth=100.0
        )
        tg.send_private(OWNER, "go on")
        await h.bot_text(OWNER, lambda t: "Answer anyway." in t)
        answer = fake_api.requests[2].json
        # The raw turns stay in what is sent (within the window budget): nothing dropped.
        assert "Turn 0:" in sent_text(answer) and SUMMARY_HEADER not in sent_text(answer)
        assert_pairs_together(answer["messages"])
        latest, attempt = await storage.compaction_state("main")
        assert latest is None and attempt is not None and not attempt.ok
        assert len(await storage.load_transcript("main")) == TURNS * 4 + 2

        fake_api.script(reply_text("Second answer."))
        tg.send_private(OWNER, "and then?")
        await h.bot_text(OWNER, lambda t: "Second answer." in t)
        assert len(fake_api.requests) == 4, "compaction was tried again for the same crossing"
        notices = [m for m in tg.bot_messages(OWNER) if m.text and "I couldn't compact the conversation" in m.text]
        assert len(notices) == 1
        assert "older messages are left out instead" in notices[0].text


async def test_compact_command_through_the_chat_and_status_shows_before_and_after(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        storage = h.app.storage
        await seed(storage)
        h.app.agent.compactor.config = CompactionConfig(keep_recent_tokens=2000)  # 200k window: never due
        tg.send_private(OWNER, "/compact")
        await h.bot_text(OWNER, lambda t: t.startswith("I'll compact this conversation"))
        fake_api.script(reply_text("nothing to save"), reply_text(SUMMARY), reply_text("Compacted answer."))
        tg.send_private(OWNER, "continue")
        await h.says(OWNER, "Compacted answer.")
        assert first_user_text(fake_api.requests[2].json).startswith(SUMMARY_HEADER)
        tg.send_private(OWNER, "/status")
        status = await h.bot_text(OWNER, lambda t: t.startswith("Model:"))
        latest, _ = await storage.compaction_state("main")
        assert latest is not None and latest.forced
        assert f"≈ {latest.tokens_before:,} → {latest.tokens_after:,} tokens" in status.text
        assert "% fewer" in status.text and "Context sent now: summary + " in status.text


def _turn(i: int, with_tool: bool) -> list[dict[str, Any]]:
    out = [{"role": "user", "content": [{"type": "text", "text": f"turn {i} " + "x" * 200}]}]
    if with_tool:
        out += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "n", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "y" * 500}]},
        ]
    return out + [{"role": "assistant", "content": [{"type": "text", "text": "done"}]}]


def test_cut_never_separates_a_tool_use_from_its_result_and_keeps_the_newest_turn() -> None:
    stored = [m for i in range(10) for m in _turn(i, with_tool=i % 2 == 0)]
    for keep in (0, 100, 1000, 3000, 10**6):
        cut = cut_index(stored, keep, -1)
        if cut is None:
            continue
        first = stored[cut]
        assert first["role"] == "user" and first["content"][0]["type"] == "text"
        assert cut <= max(i for i, m in enumerate(stored) if m["role"] == "user" and m["content"][0]["type"] == "text")
    assert cut_index(stored, 0, -1) == len(stored) - 2  # even a huge last turn stays verbatim
    assert cut_index(stored, 10**6, -1) is None or cut_index(stored, 10**6, -1) == 0
    assert cut_index(stored, 0, len(stored) - 2) is None  # nothing new to cover


def test_summary_always_has_every_seed_section_in_order() -> None:
    text = normalise_summary("**Goal**\n- ship it\nstray line\n## Blocked\n- CI is red")
    positions = [text.index(f"## {s}") for s in SECTIONS]
    assert positions == sorted(positions)
    assert "- ship it" in text and "- CI is red" in text and "stray line" in text


async def test_compaction_runs_before_windowing_would_leave_turns_out_silently(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Under the token threshold, but the history no longer fits the loop's window budget:
    compacting first, instead of windowing dropping the oldest turns without a word."""
    fake_api.script(reply_text("nothing to save"), reply_text(SUMMARY), reply_text("Fits now."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        await seed(h.app.storage)
        h.app.agent.compactor.config = CompactionConfig(keep_recent_tokens=2000)  # 200k window: under threshold
        h.app.agent.config = dataclasses.replace(h.app.agent.config, history_budget_chars=40_000)
        tg.send_private(OWNER, "go on")
        await h.says(OWNER, "Fits now.")
        answer = fake_api.requests[2].json
        assert first_user_text(answer).startswith(SUMMARY_HEADER) and "Turn 23:" in sent_text(answer)


async def test_stalled_summary_call_times_out_and_the_run_still_answers(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Near the limit the summary call hangs: the attempt ends at its timeout, inside the run,
    and the session answers instead of deadlocking."""
    fake_api.script(reply_text("nothing to save"), Stall(None), reply_text("Still here."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        await seed(h.app.storage)
        h.app.agent.compactor.config = CompactionConfig(context_window_tokens=1000, keep_recent_tokens=2000, timeout_s=1.0)
        tg.send_private(OWNER, "go on")
        await h.bot_text(OWNER, lambda t: "Still here." in t, timeout=30)
        notice = await h.bot_text(OWNER, lambda t: "I couldn't compact the conversation: it took too long" in t)
        assert notice is not None
        _, attempt = await h.app.storage.compaction_state("main")
        assert attempt is not None and not attempt.ok and attempt.error == "it took too long"


class _MemoryStore:
    def __init__(self) -> None:
        self.records: list[Any] = []

    async def compaction_state(self, session_key: str) -> tuple[Any, Any]:
        ok = [r for r in self.records if r.ok]
        return (ok[-1] if ok else None, self.records[-1] if self.records else None)

    async def save_compaction(self, record: Any) -> None:
        self.records.append(record)


class _NoModel:
    """An LLMClient that must not be called (the case under test never compacts)."""

    def stream(self, request: Any) -> Any:
        raise AssertionError("the model was called")


async def test_estimate_follows_the_real_prompt_size_and_a_compaction_that_stays_over_never_loops() -> None:
    from agent_core.compaction import CompactionCall, CompactionRecord, Compactor
    from agent_core.events import Usage

    async def no_tools(uses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return []

    stored = [m for i in range(6) for m in _turn(i, with_tool=True)]
    store = _MemoryStore()
    compactor = Compactor(_NoModel(), store, CompactionConfig(context_window_tokens=4000, compact_at=0.5, keep_recent_tokens=100))  # type: ignore[arg-type]

    def call() -> CompactionCall:
        return CompactionCall("s", "m", [], [], stored, [{"type": "text", "text": "hi"}], no_tools)

    first = call()
    await compactor.prepare(first)  # ≈ 1,550 estimated tokens: under the 2,000 threshold
    assert store.records == [] and first.notices == []
    compactor.observe("s", Usage(input_tokens=3000))  # the service counted more than twice that
    due = call()
    await compactor.prepare(due)  # now due: the (failing) model is asked; the failure is recorded
    assert len(store.records) == 1 and "the model was called" in store.records[0].error
    assert len(due.notices) == 1
    # A compaction that could not get under the threshold: the next run does not try again.
    store.records.append(CompactionRecord("s", 4, "x", 2600, 2500, True))
    again = call()
    await compactor.prepare(again)
    assert len(store.records) == 2 and again.notices == []


async def test_second_compaction_folds_the_first_summary_in_and_sends_one_summary(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    second = SUMMARY.replace("items 0-20", "items 0-22")
    fake_api.script(reply_text("nothing"), reply_text(SUMMARY), reply_text("One."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        storage = h.app.storage
        await seed(storage)
        # Keep only the newest turn: each run has something new to fold in; still over the
        # (tiny) threshold after compacting, so retry as soon as the context grows at all.
        h.app.agent.compactor.config = dataclasses.replace(DUE, keep_recent_tokens=300, retry_growth=0.0)
        tg.send_private(OWNER, "first")
        await h.says(OWNER, "One.")
        first, _ = await storage.compaction_state("main")
        fake_api.script(reply_text("nothing"), reply_text(second), reply_text("Two."))
        tg.send_private(OWNER, "second")
        await h.says(OWNER, "Two.")
        latest, _ = await storage.compaction_state("main")
        assert first is not None and latest is not None and latest.covered > first.covered
        summary_call, answer = fake_api.requests[4].json, fake_api.requests[5].json
        assert "Summary of what came before" in sent_text(summary_call) and "items 0-20" in sent_text(summary_call)
        assert sent_text(answer).count(SUMMARY_HEADER) == 1 and "items 0-22" in sent_text(answer)
        assert "items 0-20" not in sent_text(answer)
        assert_pairs_together(answer["messages"])
        assert len(await storage.load_transcript("main")) == TURNS * 4 + 4


async def test_compactions_flush_and_summary_calls_count_against_the_budget(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """They are model calls of the run: its stored usage is all three calls, and a paired
    user's daily budget sees them (uncounted, the 50-token answer left 870 of 920 free); when
    they alone cross the budget, the run ends before its own model call, saying so."""
    from tests.telegram_harness import MEMBER, STRANGER

    def spend(tokens: int) -> dict[str, int]:
        return {"input_tokens": tokens - 10, "output_tokens": 10, "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0}  # fmt: skip

    fake_api.script(
        reply_text("nothing to save", usage=spend(300)),  # the silent memory flush
        reply_text(SUMMARY, usage=spend(600)),  # the summary
        reply_text("Next: item 24.", usage=spend(50)),  # the run's own answer
    )
    limits = {"user": {"messages_per_minute": 0, "runs_per_hour": 0, "daily_tokens": 920}}
    async with running(tmp_path, tg, fake_api, paced=False, limits=limits) as h:
        key = f"dm:telegram:{STRANGER}"
        await h.app.storage.pair_user("telegram", str(STRANGER), "Sam")
        await seed(h.app.storage, session_key=key)
        h.app.agent.compactor.config = DUE
        tg.send_private(STRANGER, "what next?", first_name="Sam")
        await h.says(STRANGER, "Next: item 24.")
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 3
        spent = (await h.app.storage.usage_for_session(key)).usage
        assert spent.input_tokens + spent.output_tokens == 950
        tg.send_private(STRANGER, "and then?", first_name="Sam")
        await h.says(STRANGER, "You've used today's budget of 920 tokens; try again at midnight.")
        assert len(fake_api.requests) == 3

        # Another user whose budget the compaction alone crosses: no answer call after it.
        fake_api.script(reply_text("nothing to save", usage=spend(300)), reply_text(SUMMARY, usage=spend(700)))
        other = f"dm:telegram:{MEMBER}"
        await h.app.storage.pair_user("telegram", str(MEMBER), "Bob")
        await seed(h.app.storage, session_key=other)
        tg.send_private(MEMBER, "what next?", first_name="Bob")
        await h.bot_text(MEMBER, lambda t: "(Stopped: you've used today's budget of 920 tokens" in t)
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 5
        spent = (await h.app.storage.usage_for_session(other)).usage
        assert spent.input_tokens + spent.output_tokens == 1000
