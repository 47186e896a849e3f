"""`roost status`: the run metrics of today and this week (every session and the total, as
the owner's /usage shows them), runs going on and messages waiting — from the database, so
it works beside a running `roost run` or without one."""

from __future__ import annotations

import argparse
from datetime import datetime

from bot.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    status = sub.add_parser("status", help="runs, tokens, cache hits, estimated cost; what is running and waiting")
    status.add_argument("--session", help="only this session key (e.g. main)")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.storage import Storage
    from bot.usage_report import usage_text

    storage = await Storage.open(settings.db_url)
    try:
        now = datetime.now().astimezone()
        print(await usage_text(storage, now, session_key=args.session))
        running = await storage.runs_left_running()
        waiting = await storage.inbox_rows({"received", "queued"})
        print(f"Running now: {len(running)} run{'s' if len(running) != 1 else ''}; "
              f"waiting: {len(waiting)} message{'s' if len(waiting) != 1 else ''}")  # fmt: skip
        return 0
    finally:
        await storage.aclose()
