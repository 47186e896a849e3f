"""`roost jobs list|cancel`: scheduled jobs from the machine, beside or without `roost run`.

Both act on the database only: a running `roost run` reads the jobs table on every tick, so
a job cancelled here never fires there."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from bot.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    jobs = sub.add_parser("jobs", help="list or cancel scheduled jobs")
    jobs_sub = jobs.add_subparsers(dest="action", required=True)
    listed = jobs_sub.add_parser("list", help="every job with next/last run and statuses")
    listed.add_argument("--session", help="only this session key (e.g. main)")
    listed.add_argument("--all", action="store_true", help="also cancelled and finished jobs")
    cancelled = jobs_sub.add_parser("cancel", help="cancel one job by id")
    cancelled.add_argument("id")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.operations import CLI
    from bot.operations.cli import operations
    from bot.scheduling.book import describe

    async with operations(settings) as ops:
        if args.action == "list":
            jobs = await ops.jobs(CLI, args.session, include_ended=args.all)
            if not jobs:
                print("No scheduled jobs.")
                return 0
            now = datetime.now(UTC)
            for job in jobs:
                print(f"{describe(job, now)}\nsession: {job.session_key}\n")
            return 0
        done, answer = await ops.operate_job(CLI, "cancel", args.id)
        print(answer)
        return 0 if done else 1
