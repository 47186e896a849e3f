"""The running process's circuit breaker states, written to a small JSON file on every change
so that `roost doctor` (another process) can show them. Display only: it is never loaded back
into a breaker, so a restart on SQLite starts every model fresh (a saved cooldown must not
block a provider that recovered meanwhile). Replicas on PostgreSQL share their breakers
through the database instead (agent_core.breaker); this file shows this replica's view."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.breaker import Breakers

log = logging.getLogger(__name__)

FILE_NAME = "breakers.json"


@dataclass(frozen=True, slots=True)
class ReportedBreaker:
    model: str
    state: str
    failures: int
    retry_at: float | None
    """Wall-clock time (epoch seconds) when an open breaker allows a probe."""
    last_error: str

    def describe(self, now: float) -> str:
        if self.state == "closed":
            return f"{self.model}: ok" + (f" ({self.failures} recent failures)" if self.failures else "")
        if self.state == "open" and self.retry_at is not None and self.retry_at > now:
            return f"{self.model}: open ({self.last_error}), next try in {self.retry_at - now:.0f} s"
        return f"{self.model}: probing ({self.last_error})"


def write(path: Path, breakers: Breakers) -> None:
    """Replace the file atomically with the breakers' current states."""
    now = time.time()
    rows: list[dict[str, Any]] = [
        {
            "model": s.model,
            "state": s.state,
            "failures": s.failures,
            "retry_at": now + s.retry_in_s if s.retry_in_s is not None else None,
            "last_error": s.last_error,
        }
        for s in breakers.statuses()
    ]
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps({"written_at": now, "pid": os.getpid(), "breakers": rows}))
        os.replace(tmp, path)
    except OSError:
        log.warning("llm.breaker_report_failed", exc_info=True)


def read(path: Path) -> tuple[float, list[ReportedBreaker]] | None:
    """(written_at, breakers) as last written, or None when there is no readable report."""
    try:
        data = json.loads(path.read_text())
        rows = [
            ReportedBreaker(
                str(r["model"]), str(r["state"]), int(r["failures"]),
                float(r["retry_at"]) if r.get("retry_at") is not None else None, str(r.get("last_error", "")),
            )  # fmt: skip
            for r in data["breakers"]
        ]
        return float(data["written_at"]), rows
    except (OSError, ValueError, KeyError, TypeError):
        return None
