"""The text of /usage and `roost status`: today and this week, per session and in total,
summed from the stored run metrics (bot.storage.metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.storage import Storage
from bot.storage.metrics import MetricsTotals

COST_NOTE = (
    "Costs are computed only from prices configured per model with their source "
    "(ROOST_AGENT__MODELS); runs of other models show as unknown cost."
)


@dataclass(frozen=True, slots=True)
class Windows:
    today: datetime
    week: datetime

    @classmethod
    def at(cls, now: datetime) -> Windows:
        """Today = since midnight of `now`'s own zone; this week = the last 7 days."""
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return cls(midnight, now - timedelta(days=7))


def ratio(t: MetricsTotals) -> str:
    hit = t.cache_hit_ratio
    return "–" if hit is None else f"{hit:.1%}"


def line(t: MetricsTotals) -> str:
    """One window's figures, in a fixed order (tests read them back)."""
    ttft = "–" if t.first_token_avg_s is None else f"{t.first_token_avg_s:.2f} s"
    return (
        f"{t.runs} runs ({t.errors} failed), {t.turns} turns, {t.tool_calls} tool calls "
        f"({t.tool_errors} errors, {t.tool_seconds:.1f} s); tokens {t.input_tokens:,} in, "
        f"{t.output_tokens:,} out, {t.cache_read_tokens:,} cache read, {t.cache_write_tokens:,} cache write; "
        f"cache hit {ratio(t)}; time {t.duration_s:.1f} s, first token avg {ttft}; "
        f"fallbacks {t.fallbacks}; {f'web searches {t.web_searches}; ' if t.web_searches else ''}{cost(t)}"
    )


def cost(t: MetricsTotals) -> str:
    if t.runs and t.unpriced_runs >= t.runs:
        return "cost unknown"
    unknown = f" + {t.unpriced_runs} run(s) of unknown cost" if t.unpriced_runs else ""
    return f"≈ ${t.cost_usd:.4f}{unknown}"


async def usage_text(storage: Storage, now: datetime, *, session_key: str | None) -> str:
    """Today and this week; with `session_key` only that session, else every session and
    the total (what the owner sees)."""
    windows = Windows.at(now)
    if session_key is None:
        every = {}
        for label, since in (("Today", windows.today), ("This week", windows.week)):
            every[label] = (await storage.metrics_totals(since), await storage.metrics_by_session(since))
        return windows_text(every)
    parts: list[str] = []
    for label, since in (("Today", windows.today), ("This week", windows.week)):
        parts.append(f"{label} ({session_key}): {line(await storage.metrics_totals(since, session_key=session_key))}")
    parts.append(COST_NOTE)
    return "\n".join(parts)


def windows_text(windows: dict[str, tuple[MetricsTotals, dict[str, MetricsTotals]]]) -> str:
    """Every session and the total per window, as `Operations.usage_windows` gives them (the
    dashboard's figures), so /usage and the dashboard print the same numbers."""
    parts: list[str] = []
    for label, (total, by_session) in windows.items():
        parts.append(f"{label}, total: {line(total)}")
        for key, totals in by_session.items():
            parts.append(f"  {key}: {line(totals)}")
    parts.append(COST_NOTE)
    return "\n".join(parts)
