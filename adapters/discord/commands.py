"""Slash commands mirroring the text commands (/new, /stop, /status, /model, /help, /allow).

Each slash command becomes the text command it mirrors ("/model opus") and goes through
the same `InboundHandler.receive` as a typed one, so access and behaviour cannot differ by
platform; the adapter answers it ephemerally (see `DiscordAdapter._slash`). The command
set is registered (bulk overwrite) at start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import discord
from discord import app_commands

Run = Callable[[discord.Interaction, str], Awaitable[None]]
WITH_ARGS = frozenset({"model", "allow", "revoke", "grants"})
"""Commands that take text after the name (an optional `args` option)."""


def _command(name: str, description: str, run: Run) -> app_commands.Command:  # type: ignore[type-arg]
    if name in WITH_ARGS:

        async def with_args(interaction: discord.Interaction, args: str | None = None) -> None:
            await run(interaction, f"/{name} {args or ''}".strip())

        return app_commands.Command(name=name, description=description[:100], callback=with_args)

    async def bare(interaction: discord.Interaction) -> None:
        await run(interaction, f"/{name}")

    return app_commands.Command(name=name, description=description[:100], callback=bare)


def command_tree(client: discord.Client, commands: Mapping[str, str], run: Run) -> app_commands.CommandTree:  # type: ignore[type-arg]
    """A tree holding one slash command per entry of `commands` (name → description)."""
    tree: app_commands.CommandTree = app_commands.CommandTree(client)  # type: ignore[type-arg]
    for name, description in commands.items():
        tree.add_command(_command(name, description, run))
    return tree
