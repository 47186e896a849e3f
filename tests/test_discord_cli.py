"""`roost` as a process with Discord: a rejected token is one line that never shows it, and
`roost pairing approve discord CODE` pairs a stranger the running bot then answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.discord_harness import PAIRING_CODE, STRANGER, TOKEN, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.discord_api import FakeDiscord
from tests.test_cli import SECRET_KEY, env_for, roost

BAD_TOKEN = "MTA-REJECTED-discord.token_that-must-never-print"


def test_rejected_discord_token_is_one_line_that_never_shows_it(tmp_path: Path, dc: FakeDiscord) -> None:
    """The fake answers the login's GET /users/@me with 401, like Discord for a wrong token."""
    result = roost("run", env=env_for(
        tmp_path / "home", DISCORD_BOT_TOKEN=BAD_TOKEN,
        ROOST_DISCORD__API_BASE=dc.api_base, ROOST_DISCORD__GATEWAY_URL=dc.gateway_url))
    output = result.stdout + result.stderr
    assert [c.status for c in dc.calls if c.path == "/users/@me"] == [401]
    assert result.returncode == 1
    assert BAD_TOKEN not in output and "REJECTED" not in output and SECRET_KEY not in output
    assert "Traceback" not in output
    assert result.stderr.rstrip().splitlines()[-1] == (
        "roost: Discord rejected the bot token — check DISCORD_BOT_TOKEN "
        "(Developer Portal → your application → Bot → Reset Token).")


async def test_roost_pairing_approve_discord_pairs_the_stranger(
    tmp_path: Path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Welcome, Sam."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(STRANGER)
        dc.say(dm, STRANGER, "hello bot")
        told = await h.bot_text(dm, lambda t: PAIRING_CODE.search(t) is not None)
        code = PAIRING_CODE.search(told.content).group(0)  # type: ignore[union-attr]
        env = env_for(h.app.settings.home, DISCORD_BOT_TOKEN=TOKEN)
        approved = await asyncio.to_thread(roost, "pairing", "approve", "discord", code.lower(), env=env)
        assert approved.returncode == 0, approved.stderr
        assert TOKEN not in approved.stdout + approved.stderr
        dc.say(dm, STRANGER, "hello again")
        await h.bot_text(dm, lambda t: t == "Welcome, Sam.")
        assert len(fake_api.requests) == 1


def test_refused_privileged_intent_and_a_failed_connection_are_one_line_each() -> None:
    import discord

    from adapters.discord import DiscordStartError
    from bot.failures import describe_failure

    try:
        try:
            raise discord.errors.PrivilegedIntentsRequired(None)
        except discord.errors.PrivilegedIntentsRequired as exc:
            raise DiscordStartError(f"discord gateway closed before READY: {exc!r}") from exc
    except DiscordStartError as start_error:
        refused = describe_failure(start_error, None)
    assert refused is not None and "Privileged Gateway Intents" in refused
    silent = describe_failure(DiscordStartError("discord: no READY within 30 s"), None)
    assert silent == "cannot connect to Discord (Discord): DiscordStartError: discord: no READY within 30 s"
