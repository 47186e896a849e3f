"""`roost grants list|revoke`, and the text `/grants` answers with in the owner's chat.

A grant is "Always allow in this session" for one session, one tool and one exact input
(and, for a command naming workspace files, their content: "while task.sh is unchanged");
listing shows each with its id, revoking deletes one by id (and is audited)."""

from __future__ import annotations

import argparse
import sys

# The texts live with the operations layer (/grants in bot.command_handlers uses them there).
from bot.operations.grants import (  # noqa: F401
    CHAT_LISTING,
    SHOWN_INPUT_CHARS,
    GrantStore,
    grant_line,
    listing,
    revoke,
)
from bot.settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    grants = sub.add_parser("grants", help="list or revoke 'always allow' rules")
    grants_sub = grants.add_subparsers(dest="action", required=True)
    listed = grants_sub.add_parser("list", help="list the rules with their ids")
    listed.add_argument("--session", help="only this session key (e.g. main)")
    revoked = grants_sub.add_parser("revoke", help="revoke one rule by id")
    revoked.add_argument("id")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.operations import CLI
    from bot.operations.cli import operations

    async with operations(settings) as ops:
        if args.action == "list":
            print(listing(await ops.grants(CLI, args.session), "Revoke one with: roost grants revoke <id>"))
            return 0
        answer = await ops.revoke_grant(CLI, args.id)
        print(answer, file=sys.stdout if answer.startswith("Revoked") else sys.stderr)
        return 0 if answer.startswith("Revoked") else 1
