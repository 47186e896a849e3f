"""Run metrics from the events a run already yields, and anomalies told to the owner once.

A `RunMeter` watches one run's events (first text → time to first token; tool finishes →
count, errors, seconds); when the run ends, `Metrics.record` joins it with what the loop
stored for the run (status, turns, tokens, model) into one `run_metrics` row, so /usage
adds up exactly what the runs table holds. Nothing here changes how a run behaves.

Anomalies: a run over 5 minutes, over 50 tool calls, or more than 20 % failed runs in the
last hour (at least 5 runs) — logged as `run.anomaly` and sent to the owners' private chats
once each (claimed in `notices_sent` first, so a restart never repeats one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agent_core.events import Event, RunFailed, RunFinished, TextDelta, ToolFinished
from agent_core.inbound import ReplyTarget
from agent_core.models import ModelTable
from bot.commands import estimate_cost
from bot.storage import Storage
from bot.storage.metrics import RunMetrics
from bot.storage.records import RunRow

if TYPE_CHECKING:
    from adapters.base import Adapter
    from bot.router import Router

log = logging.getLogger(__name__)

SLOW_RUN_S = 300.0
MANY_TOOL_CALLS = 50
ERROR_RATE = 0.20
ERROR_WINDOW = timedelta(hours=1)
ERROR_MIN_RUNS = 5
"""Fewer runs than this in the window say nothing about a rate (one failure of one is 100 %)."""

Notify = Callable[[str], Awaitable[None]]


@dataclass
class RunMeter:
    """Timing and tool counts of one run, from its events."""

    clock: Callable[[], float]
    started: float = 0.0
    ended: float | None = None
    first_token_s: float | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    tool_seconds: float = 0.0
    outcome: RunFinished | RunFailed | None = None
    _seen_text: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def observe(self, event: Event) -> None:
        if isinstance(event, TextDelta) and self.first_token_s is None and event.text:
            self.first_token_s = self.clock() - self.started
        elif isinstance(event, ToolFinished):
            self.tool_calls += 1
            self.tool_errors += int(event.is_error)
            self.tool_seconds += event.duration_s
        elif isinstance(event, RunFinished | RunFailed):
            self.outcome = event

    def stop(self) -> None:
        if self.ended is None:
            self.ended = self.clock()

    def elapsed(self) -> float:
        return (self.clock() if self.ended is None else self.ended) - self.started


class Metrics:
    """Records run metrics and watches for anomalies. `clock` (monotonic seconds) and `now`
    (UTC) are injectable for tests."""

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        prices: ModelTable | None = None,
    ) -> None:
        self.prices = prices
        """Per-model prices with their source (None or unpriced: the cost is unknown)."""
        self.storage = storage
        self.clock = clock
        self.now = now
        self._pending: set[asyncio.Task[RunMetrics | None]] = set()

    def finish_later(self, run_id: str, meter: RunMeter, notify: Notify) -> None:
        """`finish` once the caller has moved on: recording never keeps a session's lane
        busy (the next message would be told to wait). Owned here; `settle` awaits them."""
        meter.stop()
        task = asyncio.create_task(self.finish(run_id, meter, notify), name=f"metrics:{run_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settle(self) -> None:
        """Wait until every run's metrics are stored (shutdown, before storage closes; tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def meter(self) -> RunMeter:
        return RunMeter(self.clock)

    async def finish(self, run_id: str, meter: RunMeter, notify: Notify) -> RunMetrics | None:
        """After a run: store its metrics and tell the owner about anomalies, in one
        transaction plus one per anomaly. Never raises (metrics must not break anything)."""
        try:
            metrics, runs, failed = await self.storage.measure_run(
                run_id, lambda run: self.metrics_of(run, meter), self.now() - ERROR_WINDOW
            )
            if metrics is not None:
                await self.anomalies(metrics, notify, failed_share=(runs, failed))
            return metrics
        except Exception:
            log.exception("metrics.record_failed", extra={"run": run_id})
            return None

    def metrics_of(self, run: RunRow, meter: RunMeter) -> RunMetrics:
        """The run's stored figures (status, turns, tokens) with the meter's timings."""
        outcome = meter.outcome
        answered_by = outcome.model if isinstance(outcome, RunFinished) and outcome.model else run.model
        usage = run.usage
        # Searches are counted by the run's outcome (the runs table keeps tokens only).
        searches = outcome.usage.web_search_requests if outcome is not None else 0
        return RunMetrics(
            run_id=run.id,
            session_key=run.session_key,
            status=run.status,
            model=answered_by,
            started_at=run.started_at,
            duration_s=round(meter.elapsed(), 3),
            first_token_s=None if meter.first_token_s is None else round(meter.first_token_s, 3),
            turns=run.turns,
            tool_calls=meter.tool_calls,
            tool_errors=meter.tool_errors,
            tool_seconds=round(meter.tool_seconds, 3),
            errors=int(run.status == "failed"),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_input_tokens,
            cache_write_tokens=usage.cache_creation_input_tokens,
            # A model that is not the one asked for (nor a dated version of it) answered.
            fallbacks=int(not answered_by.startswith(run.model)),
            cost_usd=estimate_cost(
                answered_by, usage.input_tokens, usage.output_tokens,
                usage.cache_read_input_tokens, usage.cache_creation_input_tokens, self.prices, searches,
            ),
            web_searches=searches,
        )  # fmt: skip

    async def anomalies(
        self, m: RunMetrics, notify: Notify, *, failed_share: tuple[int, int] | None = None
    ) -> list[str]:
        """Check one finished run and the last hour (`failed_share` = (runs, failed) when
        already counted); each anomaly is logged and sent through `notify` once. Returns
        the texts sent."""
        found: list[tuple[str, str, str]] = []
        if m.duration_s > SLOW_RUN_S:
            found.append(("anomaly.slow", m.run_id,
                          f"a run in {m.session_key} took {m.duration_s / 60:.1f} minutes"))  # fmt: skip
        if m.tool_calls > MANY_TOOL_CALLS:
            found.append(("anomaly.tools", m.run_id, f"a run in {m.session_key} made {m.tool_calls} tool calls"))
        now = self.now()
        runs, failed = failed_share or await self.storage.failed_share(now - ERROR_WINDOW)
        if runs >= ERROR_MIN_RUNS and failed / runs > ERROR_RATE:
            # Once per clock hour: a bad hour is one notice, not one per failed run.
            found.append(("anomaly.errors", now.strftime("%Y-%m-%dT%H"),
                          f"{failed} of the last hour's {runs} runs failed ({failed / runs:.0%})"))  # fmt: skip
        sent: list[str] = []
        for kind, ref, what in found:
            log.warning("run.anomaly", extra={"kind": kind, "ref": ref, "detail": what})
            if await self.storage.claim_notice(kind, ref):
                text = f"⚠️ Unusual: {what}. (/usage shows the figures.)"
                await notify(text)
                sent.append(text)
        return sent


def owner_notifier(adapters: Mapping[str, Adapter], router: Router) -> Notify:
    """Sends a text to every owner's private chat on every connected platform."""

    async def notify(text: str) -> None:
        for platform, adapter in adapters.items():
            for owner in router.owners_on(platform):
                try:
                    await adapter.send_text(ReplyTarget(platform, owner), text)
                except Exception:  # the owner may never have opened a chat with the bot
                    log.warning("anomaly.notify_failed", extra={"platform": platform}, exc_info=True)

    return notify
