"""Slash commands answered ephemerally through the same command handling as text; the
Message Content intent missing → one start-up line with the fix, and DMs still work."""

from __future__ import annotations

import logging

import pytest

from adapters.discord.adapter import MISSING_INTENT
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.discord_api import INTENT_MESSAGE_CONTENT, FakeDiscord
from tests.discord_harness import CHANNEL, MEMBER, OTHER_CHANNEL, OWNER, TOKEN, dc, running, world  # noqa: F401


def ephemeral(dc: FakeDiscord, iid: str) -> list[str]:
    return [f["content"] for f in dc.interaction(iid).followups if f["flags"] & 64]


async def test_slash_commands_are_registered_and_answered_ephemerally(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        names = await dc.await_for(lambda: {c["name"] for c in dc.state.commands})
        assert {"new", "stop", "status", "model", "help", "allow"} <= names
        dm = dc.dm_channel(OWNER)
        iid = dc.slash(dm, OWNER, "help")
        answer = await dc.await_for(lambda: ephemeral(dc, iid))
        assert "Commands:" in answer[0]
        assert dc.interaction(iid).responses[0]["type"] == 5  # deferred ("thinking") at once
        iid = dc.slash(dm, OWNER, "model")
        assert "claude-test" in (await dc.await_for(lambda: ephemeral(dc, iid)))[0]
        assert not dc.bot_messages(dm)  # nothing public
        # No model was asked (/model reads only the endpoint's catalogue, GET /v1/models).
        assert not [r for r in fake_api.requests if r.path.startswith("/v1/messages")]


async def test_slash_allow_by_a_member_is_refused_and_by_the_owner_allows_the_channel(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Now I answer here."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        iid = dc.slash(OTHER_CHANNEL, MEMBER, "allow")
        assert "Only my owner" in (await dc.await_for(lambda: ephemeral(dc, iid)))[0]
        iid = dc.slash(OTHER_CHANNEL, OWNER, "allow")
        assert "I'll answer" in (await dc.await_for(lambda: ephemeral(dc, iid)))[0]
        dc.say(OTHER_CHANNEL, MEMBER, "<@900000000000000001> hello", mention_bot=True)
        await h.bot_text(OTHER_CHANNEL, lambda t: t == "Now I answer here.")


async def test_missing_message_content_intent_says_how_to_fix_it_and_dms_still_work(
    tmp_path, fake_api: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    fake_api.script(reply_text("Still here."), reply_text("Mentioned."))
    caplog.set_level(logging.WARNING, logger="adapters.discord.adapter")
    with FakeDiscord(token=TOKEN, message_content_enabled=False) as dc:
        world(dc)
        async with running(tmp_path, dc, fake_api, paced=False) as h:
            lines = [r.getMessage() for r in caplog.records if "Message Content intent" in r.getMessage()]
            assert lines == [MISSING_INTENT]
            assert "Privileged Gateway Intents" in lines[0]
            assert h.adapter.message_content_missing
            assert not dc.identifies[-1]["intents"] & INTENT_MESSAGE_CONTENT  # or Discord closes with 4014
            dm = dc.dm_channel(OWNER)
            dc.say(dm, OWNER, "are you there?")
            await h.bot_text(dm, lambda t: t == "Still here.")
            dc.say(CHANNEL, OWNER, "<@900000000000000001> and here?", mention_bot=True)
            await h.bot_text(CHANNEL, lambda t: t == "Mentioned.")


async def test_doctor_reports_the_missing_intent_with_the_fix(tmp_path, fake_api: FakeAnthropic) -> None:
    from bot.doctor import run_checks
    from tests.discord_harness import discord_settings

    with FakeDiscord(token=TOKEN, message_content_enabled=False) as dc:
        checks = {c.name: c for c in await run_checks(discord_settings(tmp_path, dc, fake_api))}
        assert checks["discord"].status == "warn"
        assert "Message Content intent is off" in checks["discord"].detail
        assert "Privileged Gateway Intents" in checks["discord"].fix
    with FakeDiscord(token=TOKEN) as dc:
        checks = {c.name: c for c in await run_checks(discord_settings(tmp_path, dc, fake_api))}
        assert checks["discord"].status == "ok"
    with FakeDiscord(token="another-token") as dc:  # ours is rejected: 401
        checks = {c.name: c for c in await run_checks(discord_settings(tmp_path, dc, fake_api))}
        assert checks["discord"].status == "fail" and TOKEN not in checks["discord"].detail


def test_both_platforms_are_served_when_both_tokens_are_set(tmp_path) -> None:
    from bot.platforms import configured_adapters
    from bot.settings import Settings

    settings = Settings(home=tmp_path, telegram_bot_token="1:tg", discord_bot_token="dc.token",
                        discord={"api_base": "http://127.0.0.1:9/api/v10"})
    assert [a.platform for a in configured_adapters(settings)] == ["telegram", "discord"]
    only_telegram = Settings(home=tmp_path, telegram_bot_token="1:tg")
    assert [a.platform for a in configured_adapters(only_telegram)] == ["telegram"]


def test_discord_endpoints_are_public_settings(monkeypatch, tmp_path) -> None:
    from bot.settings import load_settings

    monkeypatch.delenv("ROOST_CONFIG", raising=False)
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    monkeypatch.setenv("ROOST_DISCORD__API_BASE", "http://127.0.0.1:1/api/v10")
    monkeypatch.setenv("ROOST_DISCORD__GATEWAY_URL", "ws://127.0.0.1:1/gateway")
    settings = load_settings()
    assert settings.discord.api_base == "http://127.0.0.1:1/api/v10"
    assert settings.discord.gateway_url == "ws://127.0.0.1:1/gateway"
    monkeypatch.delenv("ROOST_DISCORD__API_BASE")
    monkeypatch.delenv("ROOST_DISCORD__GATEWAY_URL")
    defaults = load_settings()
    assert defaults.discord.api_base == "https://discord.com/api/v10" and defaults.discord.gateway_url is None
