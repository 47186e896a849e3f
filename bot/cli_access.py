"""`roost access list|allow|revoke`: who may talk to Roost, changed on the machine."""

from __future__ import annotations

import argparse
import sys

from bot.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    access = sub.add_parser("access", help="list, allow or revoke users and groups")
    actions = access.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="owners, approvers, paired users, allowed groups, pending pairings")
    for name, what in (("allow", "let a user or a group in"), ("revoke", "take a user's or a group's access away")):
        action = actions.add_parser(name, help=what)
        action.add_argument("target", nargs="+", help="telegram:42 (a user) or group telegram:-100123 (a group)")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.logs import RedactSecrets
    from bot.roles import AccessManager, parse_target
    from bot.storage import Storage

    target = None
    if args.action != "list":
        try:
            target = parse_target(" ".join(args.target))
        except ValueError as exc:
            print(f"roost: {exc}", file=sys.stderr)
            return 2
    storage = await Storage.open(settings.db_url)
    storage.use_redactor(RedactSecrets(settings.secrets).redact)
    config_groups = {"telegram": settings.telegram.allowed_groups, "discord": settings.discord.allowed_channels}
    manager = AccessManager(
        storage, storage, owners=settings.owners, approvers=settings.approvers, config_groups=config_groups
    )
    try:
        if target is None:
            await _list(settings, storage, config_groups)
            return 0
        actor = "cli"
        reply = await (manager.allow(target, actor) if args.action == "allow" else manager.revoke(target, actor))
        print(reply)
        return 0
    finally:
        await storage.aclose()


async def _list(settings: Settings, storage, config_groups: dict[str, list[str]]) -> None:  # noqa: ANN001
    print("Owners (ROOST_OWNERS):", ", ".join(settings.owners) or "none")
    print("Approvers (ROOST_APPROVERS):", ", ".join(settings.approvers) or "none besides the owners")
    paired = await storage.paired_users()
    print(f"Paired users ({len(paired)}):")
    for user in paired:
        name = f" {user.user_name}" if user.user_name else ""
        print(f"  {user.platform}:{user.user_id}{name}, since {user.paired_at:%Y-%m-%d %H:%M} UTC")
    print("Groups allowed by configuration:")
    for platform, ids in config_groups.items():
        if ids:
            print(f"  {platform}: {', '.join('any group' if i == '*' else i for i in ids)}")
    runtime = await storage.runtime_groups()
    print(f"Groups allowed at runtime ({len(runtime)}):")
    for platform, chat_id, added in runtime:
        print(f"  group {platform}:{chat_id}, since {added:%Y-%m-%d %H:%M} UTC")
    pending = await storage.list_pending_pairings()
    if pending:
        print(f"Pending pairing requests ({len(pending)}):")
        for p in pending:
            print(f"  {p.platform}:{p.user_id} {p.user_name} code {p.code}, expires {p.expires_at:%H:%M} UTC")
