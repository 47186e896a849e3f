"""Why `roost` could not start, in one line a person can act on (never a secret)."""

from __future__ import annotations

import traceback
from collections.abc import Iterator

from bot.settings import Settings

_DB_MODULES = ("/sqlalchemy/", "/asyncpg/", "/aiosqlite/", "/alembic/", "/sqlite3/")


def describe_failure(exc: BaseException, settings: Settings | None) -> str | None:
    """A one-line explanation for a known start-up failure, or None for anything else
    (a bug: the caller shows the redacted traceback)."""
    chain = list(_chain(exc))
    names = {f"{type(e).__module__}.{type(e).__name__}" for e in chain}
    if "telegram.error.InvalidToken" in names:
        return ("Telegram rejected the bot token (getMe answered Unauthorized or Not Found). "
                "Check TELEGRAM_BOT_TOKEN: copy it again from @BotFather.")
    if any(n.startswith("telegram.error.") for n in names):
        base = settings.telegram.base_url if settings is not None else "the Telegram Bot API"
        return f"cannot reach the Telegram Bot API ({_host(base)}): {_reason(chain)}"
    if "discord.errors.LoginFailure" in names:
        return ("Discord rejected the bot token — check DISCORD_BOT_TOKEN "
                "(Developer Portal → your application → Bot → Reset Token).")
    if "discord.errors.PrivilegedIntentsRequired" in names:
        return ("Discord refused a privileged intent the bot asked for — enable it in the Developer "
                "Portal → your application → Bot → Privileged Gateway Intents (Message Content).")
    if "adapters.discord.adapter.DiscordStartError" in names or any(n.startswith("discord.") for n in names):
        base = settings.discord.api_base if settings is not None else "Discord"
        return f"cannot connect to Discord ({_host(base)}): {_reason(chain)}"
    if any(_from_database(e) for e in chain):
        url = safe_url(settings.db_url) if settings is not None else "the database"
        return (f"cannot use the database {url}: {_reason(chain)}. Check ROOST_DATABASE_URL "
                "(or unset it for the embedded SQLite database in ROOST_HOME).")
    return None


def safe_url(url: str) -> str:
    """A database URL without its user and password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _from_database(exc: BaseException) -> bool:
    module = type(exc).__module__
    if module.startswith(("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3", "alembic")):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return any(part in frame.filename for frame in frames for part in _DB_MODULES)


def _reason(chain: list[BaseException]) -> str:
    """The innermost cause, which names what actually failed (e.g. connection refused)."""
    root = chain[-1]
    text = " ".join(str(root).split()) or type(root).__name__
    return f"{type(root).__name__}: {text}" if not text.startswith(type(root).__name__) else text


def _host(url: str) -> str:
    rest = url.partition("://")[2] or url
    return rest.split("/", 1)[0]
