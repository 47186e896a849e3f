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
    from bot.operations import CLI
    from bot.operations.cli import operations

    async with operations(settings) as ops:
        now = datetime.now().astimezone()
        print(await ops.usage_text(CLI, now, session_key=args.session))
        running, waiting = await ops.status_counts(CLI)
        print(f"Running now: {running} run{'s' if running != 1 else ''}; "
              f"waiting: {waiting} message{'s' if waiting != 1 else ''}")  # fmt: skip
        return 0
