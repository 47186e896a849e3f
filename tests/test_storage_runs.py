"""Runs, usage totals, interrupted runs and tool calls, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.exc import IntegrityError

from agent_core.events import Usage
from bot.storage import SessionUsage, Storage

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

# The `db_url`, `storage` and `clock` fixtures, parametrized over SQLite and PostgreSQL.
pytest_plugins = ["tests.storage_fixtures"]


async def test_run_lifecycle(storage: Storage, clock: FakeClock) -> None:
    started = clock.now
    await storage.start_run("r1", "main", "claude-sonnet")
    run = await storage.get_run("r1")
    assert run is not None
    assert (run.status, run.turns, run.usage, run.started_at, run.finished_at) == (
        "running",
        0,
        Usage(),
        started,
        None,
    )

    clock.advance(timedelta(seconds=30))
    await storage.finish_run("r1", "finished", "end_turn", 3, Usage(100, 20, 50, 10))
    run = await storage.get_run("r1")
    assert run is not None
    assert run.status == "finished"
    assert run.stop_reason == "end_turn"
    assert run.turns == 3
    assert run.usage == Usage(100, 20, 50, 10)
    assert run.started_at == started
    assert run.finished_at == clock.now
    assert await storage.get_run("missing") is None


async def test_usage_totals_per_session(storage: Storage, clock: FakeClock) -> None:
    assert await storage.usage_for_session("main") == SessionUsage(0, 0, Usage())
    await storage.start_run("r1", "main", "m")
    await storage.finish_run("r1", "finished", "end_turn", 2, Usage(10, 1, 100, 1000))
    clock.advance(timedelta(days=1))
    since = clock.now
    await storage.start_run("r2", "main", "m")
    await storage.finish_run("r2", "failed", "error", 1, Usage(20, 2, 200, 2000))
    await storage.start_run("r3", "group:telegram:1", "m")
    await storage.finish_run("r3", "finished", "end_turn", 5, Usage(999, 999, 999, 999))
    await storage.start_run("r4", "main", "m")  # still running: counts with zero usage

    totals = await storage.usage_for_session("main")
    assert totals == SessionUsage(runs=3, turns=3, usage=Usage(30, 3, 300, 3000))
    assert isinstance(totals.usage.input_tokens, int)
    today = await storage.usage_for_session("main", since=since)
    assert today == SessionUsage(runs=2, turns=1, usage=Usage(20, 2, 200, 2000))


async def test_runs_left_running_are_marked_interrupted_once(
    storage: Storage, clock: FakeClock
) -> None:
    await storage.start_run("done", "main", "m")
    await storage.finish_run("done", "finished", "end_turn", 1, Usage())
    await storage.start_run("crashed-1", "main", "m")
    clock.advance(timedelta(seconds=1))
    await storage.start_run("crashed-2", "group:discord:1", "m")

    assert [r.id for r in await storage.runs_left_running()] == ["crashed-1", "crashed-2"]
    clock.advance(timedelta(minutes=1))
    marked = await storage.mark_interrupted_runs()
    assert [r.id for r in marked] == ["crashed-1", "crashed-2"]
    assert all(r.status == "interrupted" and r.finished_at == clock.now for r in marked)
    assert await storage.runs_left_running() == []
    assert await storage.mark_interrupted_runs() == []
    done = await storage.get_run("done")
    assert done is not None and done.status == "finished"


async def test_tool_calls_recorded_and_finished(storage: Storage, clock: FakeClock) -> None:
    await storage.start_run("r1", "main", "m")
    await storage.record_tool_call("r1", "toolu_a", "exec", {"cmd": "ls", "timeout": 5})
    clock.advance(timedelta(milliseconds=10))
    await storage.record_tool_call("r1", "toolu_b", "read_file", {"path": "x"})
    clock.advance(timedelta(seconds=2))
    await storage.finish_tool_call("toolu_a", "a\nb\n", False, 2.01)

    calls = await storage.tool_calls_for_run("r1")
    assert [c.call_id for c in calls] == ["toolu_a", "toolu_b"]
    a, b = calls
    assert a.input == {"cmd": "ls", "timeout": 5}
    assert (a.output, a.is_error, a.duration_s, a.finished_at) == ("a\nb\n", False, 2.01, clock.now)
    assert (b.output, b.is_error, b.finished_at) == (None, None, None)

    await storage.finish_tool_call("toolu_b", "no such file", True, 0.1)
    assert (await storage.tool_calls_for_run("r1"))[1].is_error is True


async def test_tool_call_for_unknown_run_violates_foreign_key(storage: Storage) -> None:
    # Also proves SQLite runs with PRAGMA foreign_keys=ON.
    with pytest.raises(IntegrityError):
        await storage.record_tool_call("no-such-run", "toolu_x", "exec", {})


async def test_repeated_tool_call_ids_never_hit_a_primary_key(storage: Storage, clock: FakeClock) -> None:
    """A model repeating an id in one message, or an endpoint numbering ids per response
    ("toolu_1" in every run), hit the tool_calls primary key and failed the run."""
    await storage.start_run("r1", "main", "m")
    await storage.start_run("r2", "main", "m")
    await storage.record_tool_call("r1", "toolu_1", "read_file", {"path": "a"})
    clock.advance(timedelta(milliseconds=1))
    await storage.record_tool_call("r1", "toolu_1", "read_file", {"path": "b"})
    clock.advance(timedelta(milliseconds=1))
    await storage.record_tool_call("r2", "toolu_1", "read_file", {"path": "c"})
    await storage.finish_tool_call("toolu_1", "from r1", False, 0.1, run_id="r1")
    await storage.finish_tool_call("toolu_1", "r1 again", False, 0.1, run_id="r1")
    await storage.finish_tool_call("toolu_1", "from r2", False, 0.1)  # no run: the newest open one
    first = await storage.tool_calls_for_run("r1")
    assert [(c.input["path"], c.output) for c in first] == [("a", "r1 again"), ("b", "from r1")]
    (second,) = await storage.tool_calls_for_run("r2")
    assert (second.input["path"], second.output) == ("c", "from r2")


async def test_nul_and_lone_surrogates_are_stored_cleanly(storage: Storage) -> None:
    """PostgreSQL refuses NUL in text and JSON; a lone surrogate poisons every later request."""
    await storage.start_run("r1", "main", "model\x00")
    await storage.record_tool_call("r1", "toolu_a", "exec\x00", {"cmd\x00": "cat bin\x00 \ud83d"})
    await storage.finish_tool_call("toolu_a", "ELF\x00\x00\x01 \udc00", False, 0.1, run_id="r1")
    await storage.finish_run("r1", "finished", "end\x00turn", 1, Usage())
    (call,) = await storage.tool_calls_for_run("r1")
    assert call.name == "exec\u2400" and call.input == {"cmd\u2400": "cat bin\u2400 \ufffd"}
    assert call.output == "ELF\u2400\u2400\x01 \ufffd"
    run = await storage.get_run("r1")
    assert run is not None and (run.model, run.stop_reason) == ("model\u2400", "end\u2400turn")
