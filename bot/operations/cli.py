"""The operations layer as the CLI opens it: storage only, the owner acting (`CLI`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bot.operations.core import Operations
from bot.settings import Settings


def config_groups(settings: Settings) -> dict[str, list[str]]:
    return {"telegram": settings.telegram.allowed_groups, "discord": settings.discord.allowed_channels}


@contextlib.asynccontextmanager
async def operations(settings: Settings) -> AsyncIterator[Operations]:
    from bot.logs import RedactSecrets
    from bot.storage import Storage

    storage = await Storage.open(settings.db_url)
    storage.use_redactor(RedactSecrets(settings.secrets).redact)  # audited changes name no secret
    try:
        yield Operations(
            storage, owners=settings.owners, approvers=settings.approvers, config_groups=config_groups(settings),
            workspace=settings.workspace_dir,
        )
    finally:
        await storage.aclose()
