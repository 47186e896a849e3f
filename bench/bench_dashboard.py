"""Dashboard page loads with a large history: 10,000 runs (each with messages, a tool call,
metrics and an audit entry) over 200 sessions, served like `roost run` serves it.

Run: .venv/bin/python bench/bench_dashboard.py [--runs 10000] [--sessions 200] [--repeat 20]

Prints the median and worst time of each page (a logged-in GET over a real socket, the whole
server path: cookie check, queries, Jinja2 rendering). The target is < 300 ms per page: every
list is paged (50 rows) and ordered by an indexed column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from tests.app_harness import running_app  # noqa: E402
from tests.dashboard_harness import dashboard  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic  # noqa: E402


def fill(db: Path, runs: int, sessions: int) -> str:
    """Rows written straight into the migrated schema (fast), shaped like real ones."""
    now = datetime.now(UTC).replace(tzinfo=None)
    con = sqlite3.connect(db)
    keys = [f"group:telegram:-100{i}" if i else "main" for i in range(sessions)]
    con.executemany(
        "INSERT OR IGNORE INTO sessions (key, scope, platform, chat_id, epoch, created_at, updated_at) "
        "VALUES (?, ?, 'telegram', ?, 0, ?, ?)",
        [(k, "main" if k == "main" else "sub", k.rpartition(":")[2], now, now) for k in keys],
    )
    run_rows, metric_rows, message_rows, tool_rows, audit_rows = [], [], [], [], []
    for i in range(runs):
        key = keys[i % sessions]
        at = now - timedelta(minutes=runs - i)
        rid = f"run{i:06d}"
        run_rows.append((rid, key, "claude-test", "finished", "end_turn", 2, 900, 120, 500, 0, at, at + timedelta(seconds=3)))
        metric_rows.append((rid, key, "finished", "claude-test", at, 3.0, 0.4, 2, 1, 0, 0.2, 0, 900, 120, 500, 0, 0, 0.002))
        message_rows.append((key, 0, rid, "user", json.dumps([{"type": "text", "text": f"question {i} about things"}]), at))
        message_rows.append((key, 0, rid, "assistant", json.dumps([{"type": "text", "text": f"answer {i}"}]), at))
        tool_rows.append((f"c{i}", rid, "read_file", json.dumps({"path": f"notes/{i}.md"}), "x" * 400, False, at, at, 0.2))
        audit_rows.append((at, "tool", "telegram:1", key, "read_file", f"notes/{i}.md", "allowed", None, "ok", 400, 0.2))
    con.executemany(
        "INSERT INTO runs (id, session_key, model, status, stop_reason, turns, input_tokens, output_tokens, "
        "cache_read_tokens, cache_creation_tokens, started_at, finished_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", run_rows)
    con.executemany(
        "INSERT INTO run_metrics (run_id, session_key, status, model, started_at, duration_s, first_token_s, turns, "
        "tool_calls, tool_errors, tool_seconds, errors, input_tokens, output_tokens, cache_read_tokens, "
        "cache_write_tokens, fallbacks, cost_usd) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", metric_rows)
    con.executemany(
        "INSERT INTO messages (session_key, epoch, run_id, role, content, created_at) VALUES (?,?,?,?,?,?)",
        message_rows)
    con.executemany(
        "INSERT INTO tool_calls (call_id, run_id, name, input, output, is_error, started_at, finished_at, duration_s) "
        "VALUES (?,?,?,?,?,?,?,?,?)", tool_rows)
    con.executemany(
        "INSERT INTO audit_log (at, kind, actor, session_key, subject, detail, decision, approver, status, size, "
        "duration_s) VALUES (?,?,?,?,?,?,?,?,?,?,?)", audit_rows)
    con.commit()
    con.close()
    return run_rows[len(run_rows) // 2][0]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
        tmp_path = Path(tmp)
        async with running_app(tmp_path, fake, dashboard={"listen": "127.0.0.1:0"}) as (app, _):
            middle = fill(tmp_path / "home" / "roost.db", args.runs, args.sessions)
            async with dashboard(app) as d, httpx.AsyncClient(base_url=d.base, timeout=30) as client:
                assert (await client.get(f"/login?token={d.token}")).status_code == 303
                pages = {
                    "overview": "/", "approvals": "/approvals", "sessions": "/sessions", "runs": "/runs",
                    "runs of main": "/runs?session=main", "runs page 100": "/runs?page=100",
                    "run timeline": f"/runs/{middle}", "runs search": "/runs?q=question+5000",
                    "usage": "/usage", "audit": "/audit", "audit (tool filter)": "/audit?tool=read_file&since=1d",
                    "jobs": "/jobs", "policy": "/policy",
                }  # fmt: skip
                print(f"{args.runs:,} runs over {args.sessions} sessions; {args.repeat} loads per page")
                worst_median = 0.0
                for name, path in pages.items():
                    times = []
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        response = await client.get(path)
                        times.append((time.perf_counter() - start) * 1000)
                        assert response.status_code == 200, (path, response.status_code)
                    median = statistics.median(times)
                    worst_median = max(worst_median, median)
                    print(f"  {name:<22} median {median:7.1f} ms   worst {max(times):7.1f} ms")
                print(f"slowest page median: {worst_median:.1f} ms (target < 300 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
