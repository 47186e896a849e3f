"""`roost audit`: read the audit trail on the machine (tool calls and access decisions)."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime, timedelta

from bot.settings import Settings

_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime) -> datetime:
    """`30m`, `2h`, `1d`, `1w` before `now`, or an ISO date/time (local time when it names
    no zone). ValueError with a usable message otherwise."""
    text = text.strip()
    match = _AGO.match(text.lower())
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: use 30m, 2h, 1d, 1w or an ISO date like 2026-11-23") from None
    return (when if when.tzinfo else when.astimezone()).astimezone(UTC)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser("audit", help="show the audit trail: tool calls and access decisions")
    audit.add_argument("--session", help="only this session key (e.g. main, group:telegram:-100123)")
    audit.add_argument("--since", help="only entries since WHEN: 30m, 2h, 1d, 1w or an ISO date")
    audit.add_argument("--limit", type=int, default=100, help="newest N entries (default 100, 0 = all)")
    audit.add_argument("--json", action="store_true", help="print a JSON array instead of lines")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.operations import CLI, AuditQuery
    from bot.operations.cli import operations
    from bot.operations.core import export_rows

    try:
        since = parse_since(args.since, datetime.now(UTC)) if args.since else None
    except ValueError as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return 2
    query = AuditQuery(session_key=args.session, since=since, limit=args.limit if args.limit > 0 else None)
    async with operations(settings) as ops:
        rows = await ops.audit(CLI, query)
    if args.json:
        print(export_rows(rows, "json"))
        return 0
    if not rows:
        print("No audit entries match.")
    for row in rows:
        print(row.line())
    return 0
