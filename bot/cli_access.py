"""`roost access list|allow|revoke`: who may talk to Roost, changed on the machine."""

from __future__ import annotations

import argparse
import sys

from typing import TYPE_CHECKING

from bot.settings import Settings

if TYPE_CHECKING:
    from bot.operations.core import AccessListing


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    access = sub.add_parser("access", help="list, allow or revoke users and groups")
    actions = access.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="owners, approvers, paired users, allowed groups, pending pairings")
    for name, what in (("allow", "let a user or a group in"), ("revoke", "take a user's or a group's access away")):
        action = actions.add_parser(name, help=what)
        action.add_argument("target", nargs="+", help="telegram:42 (a user) or group telegram:-100123 (a group)")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.operations import CLI
    from bot.operations.cli import operations
    from bot.roles import parse_target

    target = None
    if args.action != "list":
        try:
            target = parse_target(" ".join(args.target))
        except ValueError as exc:
            print(f"roost: {exc}", file=sys.stderr)
            return 2
    async with operations(settings) as ops:
        if target is None:
            _list(await ops.access_listing(CLI))
            return 0
        reply = await (ops.allow(CLI, target) if args.action == "allow" else ops.revoke_access(CLI, target))
        print(reply)
        return 0


def _list(listing: AccessListing) -> None:
    print("Owners (ROOST_OWNERS):", ", ".join(listing.owners) or "none")
    print("Approvers (ROOST_APPROVERS):", ", ".join(listing.approvers) or "none besides the owners")
    paired = listing.paired
    print(f"Paired users ({len(paired)}):")
    for user in paired:
        name = f" {user.user_name}" if user.user_name else ""
        print(f"  {user.platform}:{user.user_id}{name}, since {user.paired_at:%Y-%m-%d %H:%M} UTC")
    print("Groups allowed by configuration:")
    for platform, ids in listing.config_groups.items():
        if ids:
            print(f"  {platform}: {', '.join('any group' if i == '*' else i for i in ids)}")
    runtime = listing.runtime_groups
    print(f"Groups allowed at runtime ({len(runtime)}):")
    for platform, chat_id, added in runtime:
        print(f"  group {platform}:{chat_id}, since {added:%Y-%m-%d %H:%M} UTC")
    pending = listing.pending
    if pending:
        print(f"Pending pairing requests ({len(pending)}):")
        for p in pending:
            print(f"  {p.platform}:{p.user_id} {p.user_name} code {p.code}, expires {p.expires_at:%H:%M} UTC")
