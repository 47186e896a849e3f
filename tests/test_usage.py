"""Run metrics, /usage and `roost status` through the whole app (real storage, loop and SDK
against the fake Messages API): the figures equal the sums of the stored runs; anomalies
are told to the owner once (injected clocks)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import text

from bot.run_metrics import Metrics
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_script import Error, Reply, Text, ToolUse
from tests.fakes.recording_adapter import group, private
from tests.test_cli_admin import env_for, roost

TOTAL = re.compile(
    r"Today, total: (\d+) runs \((\d+) failed\), (\d+) turns, (\d+) tool calls \((\d+) errors, [\d.]+ s\); "
    r"tokens ([\d,]+) in, ([\d,]+) out, ([\d,]+) cache read, ([\d,]+) cache write; cache hit ([\d.]+%|–)"
)


def numbers(line_match: re.Match[str]) -> tuple[int, ...]:
    return tuple(int(g.replace(",", "")) for g in line_match.groups()[:9])


async def stored_sums(app) -> tuple[int, ...]:
    """The same figures, summed straight from the runs and tool_calls tables."""
    async with app.storage.engine.connect() as conn:
        runs = (await conn.execute(text(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0), SUM(turns), "
            "SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_creation_tokens) FROM runs"
        ))).one()
        calls = (await conn.execute(text(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN is_error THEN 1 ELSE 0 END), 0) FROM tool_calls"
        ))).one()
    count, failed, turns, tin, tout, cread, cwrite = (int(v) for v in runs)
    return count, failed, turns, int(calls[0]), int(calls[1]), tin, tout, cread, cwrite


async def usage(adapter, inbound) -> str:
    before = len(adapter.notices)
    await adapter.say(inbound)
    await adapter.wait_for(lambda: len(adapter.notices) > before)
    return adapter.notices[-1][1]


def owner_warnings(adapter) -> list[str]:
    return [t for target, t in adapter.notices if target.chat_id == OWNER_ID and t.startswith("⚠️ Unusual")]


async def test_usage_figures_equal_the_sum_of_the_stored_runs(tmp_path, fake_api) -> None:
    fake_api.script(
        Reply(ToolUse("read_file", {"path": "SOUL.md"}), ToolUse("read_file", {"path": "nope.md"})),
        Reply(Text("read them")),
    )
    async with running_app(tmp_path, fake_api) as (app, adapter):
        for i, inbound in enumerate([
            private(OWNER_ID, "read my soul"),
            private(OWNER_ID, "and again"),
            private(OWNER_ID, "and once more"),
            group("-100", "42", "@roost hello group"),
        ]):
            await adapter.say(inbound)
            await adapter.wait_for(lambda n=i: len(adapter.closed_replies()) == n + 1, timeout=15)
        await app.conversations.lanes.drain()
        await app.conversations.metrics.settle()

        report = await usage(adapter, private(OWNER_ID, "/usage"))
        total = TOTAL.search(report)
        assert total is not None, report
        sums = await stored_sums(app)
        assert numbers(total) == sums
        assert sums[0] == 4 and sums[3] == 2 and sums[4] == 1  # 4 runs, 2 tool calls, one an error
        assert re.search(r"^  main: 3 runs", report, re.M) and re.search(r"^  group:telegram:-100: 1 runs", report, re.M)
        # No prices are configured for claude-test: unknown, never a guessed "$0.00".
        assert "cost unknown" in report and "$" not in report and "with their source" in report

        # Each run's row: timings and the model that answered.
        async with app.storage.engine.connect() as conn:
            run_ids = [r for (r,) in (await conn.execute(text("SELECT id FROM runs"))).all()]
        metrics = [await app.storage.run_metrics(r) for r in run_ids]
        assert all(m is not None and m.model == "claude-test" and m.fallbacks == 0 for m in metrics)
        assert all(m.first_token_s is not None and m.duration_s >= m.first_token_s for m in metrics if m)
        assert sum(m.tool_calls for m in metrics if m) == 2

        # Anyone else sees their own session only.
        mine = await usage(adapter, group("-100", "42", "/usage"))
        assert "Today (group:telegram:-100): 1 runs" in mine and "main" not in mine

    # `roost status` on the machine shows the same figures.
    status = roost("status", env=env_for(tmp_path / "home"))
    assert status.returncode == 0, status.stderr
    shown = TOTAL.search(status.stdout)
    assert shown is not None and numbers(shown) == numbers(total)
    assert "Running now: 0 runs; waiting: 0 messages" in status.stdout


async def test_a_run_over_five_minutes_is_told_to_the_owner_once(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        clock = [0.0]
        app.conversations.metrics.clock = lambda: clock[0]

        async def slow(event) -> None:
            if event.type == "run_finished":
                clock[0] += 400.0  # the run "took" 400 s on the injected clock

        adapter.on_event = slow
        await adapter.say(private(OWNER_ID, "a long job"))
        await adapter.wait_for(lambda: len(owner_warnings(adapter)) == 1)
        assert owner_warnings(adapter) == ["⚠️ Unusual: a run in main took 6.7 minutes. (/usage shows the figures.)"]
        # The same anomaly checked again (e.g. after a restart) is not told twice.
        run_id = (await app.storage.inbox_rows())[0].run_id
        stored = await app.storage.run_metrics(run_id)
        assert stored is not None and stored.duration_s == 400.0
        sent = await app.conversations.metrics.anomalies(stored, lambda t: adapter.send_text(None, t))  # type: ignore[arg-type]
        assert sent == [] and len(owner_warnings(adapter)) == 1


async def test_a_run_over_fifty_tool_calls_is_an_anomaly_told_once(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "hello"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        await app.conversations.lanes.drain()
        await app.conversations.metrics.settle()
        run_id = (await app.storage.inbox_rows())[0].run_id
        stored = await app.storage.run_metrics(run_id)
        assert stored is not None
        told: list[str] = []

        async def notify(t: str) -> None:
            told.append(t)

        busy = replace(stored, tool_calls=51)
        assert await app.conversations.metrics.anomalies(busy, notify) == told
        assert told == ["⚠️ Unusual: a run in main made 51 tool calls. (/usage shows the figures.)"]
        assert await app.conversations.metrics.anomalies(busy, notify) == []


async def test_error_rate_over_twenty_percent_in_the_last_hour_is_told_once(tmp_path, fake_api) -> None:
    fixed = datetime.now(UTC)  # the hour the notice is keyed on cannot roll over mid-test
    fake_api.script(
        Reply(Text("ok 1")), Reply(Text("ok 2")), Reply(Text("ok 3")),
        Error(401), Error(401), Error(401),
    )
    async with running_app(tmp_path, fake_api) as (app, adapter):
        app.conversations.metrics.now = lambda: fixed
        for i in range(6):
            await adapter.say(private(OWNER_ID, f"message {i}"))
            await adapter.wait_for(lambda n=i: len(adapter.closed_replies()) == n + 1, timeout=15)
            await app.conversations.lanes.drain()
            await app.conversations.metrics.settle()
            if i == 3:  # 1 of 4 failed: under 5 runs, no rate yet
                assert owner_warnings(adapter) == []
        # 2 of 5 failed (40 %) → told; 3 of 6 in the same hour → not told again.
        assert owner_warnings(adapter) == [
            "⚠️ Unusual: 2 of the last hour's 5 runs failed (40%). (/usage shows the figures.)"
        ]
        assert (await app.storage.failed_share(fixed.replace(year=fixed.year - 1))) == (6, 3)


def test_metrics_is_built_with_injectable_clocks() -> None:
    # The app injects nothing; tests replace these attributes (see above).
    m = Metrics(storage=None, clock=lambda: 1.0, now=lambda: datetime(2026, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]
    assert m.meter().started == 1.0


def test_cost_is_shown_only_from_prices_configured_with_their_source() -> None:
    import pytest

    from bot.commands import estimate_cost
    from bot.settings import AgentSettings

    with pytest.raises(ValueError, match="price_source"):
        AgentSettings(models={"claude-x": {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0}})
    table = AgentSettings(models={"claude-x": {
        "input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0, "cache_read_usd_per_mtok": 0.3,
        "cache_write_usd_per_mtok": 3.75, "price_source": "https://example.test/pricing (2026-11-01)",
    }}).model_table()  # fmt: skip
    assert estimate_cost("claude-x", 1_000_000, 100_000, 0, 0, table) == pytest.approx(4.5)
    assert estimate_cost("claude-sonnet-5-5", 1_000_000, 0, 0, 0, table) is None, "no source: unknown"
