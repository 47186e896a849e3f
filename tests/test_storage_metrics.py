"""Run metrics, notices sent once and queue modes, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from agent_core.events import Usage
from bot.storage import Storage
from bot.storage.metrics import RunMetrics
from bot.storage.records import RunRow

if TYPE_CHECKING:
    from tests.storage_fixtures import FakeClock

pytest_plugins = ["tests.storage_fixtures"]


def metrics_of(run: RunRow, *, tool_calls: int = 0, duration_s: float = 1.5) -> RunMetrics:
    u = run.usage
    return RunMetrics(
        run_id=run.id, session_key=run.session_key, status=run.status, model=run.model,
        started_at=run.started_at, duration_s=duration_s, first_token_s=0.25, turns=run.turns,
        tool_calls=tool_calls, tool_errors=0, tool_seconds=0.5 * tool_calls,
        errors=int(run.status == "failed"), input_tokens=u.input_tokens, output_tokens=u.output_tokens,
        cache_read_tokens=u.cache_read_input_tokens, cache_write_tokens=u.cache_creation_input_tokens,
        fallbacks=0, cost_usd=0.001,
    )  # fmt: skip


async def finished_run(storage: Storage, run_id: str, key: str, status: str, usage: Usage) -> None:
    await storage.start_run(run_id, key, "claude-sonnet-4-5")
    await storage.finish_run(run_id, status, "end_turn", 2, usage)


async def test_measured_runs_add_up_per_session_and_in_total(storage: Storage, clock: FakeClock) -> None:
    since = clock.now
    await finished_run(storage, "r1", "main", "finished", Usage(100, 20, 1000, 50))
    await finished_run(storage, "r2", "main", "failed", Usage(10, 0, 0, 0))
    await finished_run(storage, "r3", "group:telegram:-1", "finished", Usage(7, 3, 70, 0))
    shares = []
    for run_id, calls in (("r1", 3), ("r3", 1), ("r2", 0)):
        stored, runs, failed = await storage.measure_run(
            run_id, lambda run, c=calls: metrics_of(run, tool_calls=c), since
        )
        assert stored is not None and stored.run_id == run_id
        shares.append((runs, failed))
    # The hour's failure share is counted when a failed run lands, not rescanned per success.
    assert shares == [(0, 0), (0, 0), (3, 1)]

    total = await storage.metrics_totals(since)
    assert (total.runs, total.errors, total.turns, total.tool_calls) == (3, 1, 6, 4)
    assert (total.input_tokens, total.output_tokens, total.cache_read_tokens, total.cache_write_tokens) == (
        117, 23, 1070, 50,
    )
    assert total.cache_hit_ratio == 1070 / (117 + 1070 + 50)
    by_session = await storage.metrics_by_session(since)
    assert list(by_session) == ["main", "group:telegram:-1"]  # busiest first
    assert by_session["main"].runs == 2 and by_session["group:telegram:-1"].input_tokens == 7
    assert (await storage.metrics_totals(since, session_key="main")).output_tokens == 20
    assert (await storage.metrics_totals(clock.now + timedelta(seconds=1))).runs == 0


async def test_measuring_a_run_again_replaces_its_row_and_an_unknown_run_stores_nothing(
    storage: Storage, clock: FakeClock
) -> None:
    await finished_run(storage, "r1", "main", "finished", Usage(1, 1))
    await storage.measure_run("r1", metrics_of, clock.now)
    await storage.measure_run("r1", lambda run: replace(metrics_of(run), duration_s=9.0), clock.now)
    stored = await storage.run_metrics("r1")
    assert stored is not None and stored.duration_s == 9.0
    assert (await storage.metrics_totals(clock.now)).runs == 1
    assert await storage.measure_run("never-started", metrics_of, clock.now) == (None, 0, 0)


async def test_a_notice_is_claimed_once(storage: Storage) -> None:
    assert await storage.claim_notice("resume", "r1")
    assert not await storage.claim_notice("resume", "r1")
    assert await storage.claim_notice("anomaly.slow", "r1")  # another kind is another notice


async def test_queue_modes_are_kept_per_session(storage: Storage) -> None:
    assert not await storage.set_queue_mode("main", "steer")  # no session row yet
    await storage.ensure_session("main", "main", "telegram", "1")
    await storage.ensure_session("dm:telegram:2", "sub", "telegram", "2")
    assert await storage.set_queue_mode("main", "steer")
    assert await storage.queue_modes() == {"main": "steer"}
    await storage.set_queue_mode("main", None)
    assert await storage.queue_modes() == {}


async def test_interrupted_runs_and_their_inbox_rows(storage: Storage, clock: FakeClock) -> None:
    await storage.start_run("r1", "main", "claude-sonnet-4-5")
    assert [r.id for r in await storage.mark_interrupted_runs()] == ["r1"]
    assert [r.id for r in await storage.interrupted_runs(clock.now - timedelta(days=1))] == ["r1"]
    assert await storage.interrupted_runs(clock.now + timedelta(seconds=1)) == []
    assert await storage.inbox_for_run("r1") == []
