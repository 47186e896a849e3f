"""Roles and runtime access management: targets, the group command policy with a platform's
admins, the owner's /allow and /revoke over the wire, and ROOST_APPROVERS reaching the gate."""

from __future__ import annotations

import pytest

from agent_core.inbound import Inbound
from bot.app import build
from bot.commands import Command
from bot.roles import AccessManager, AccessTarget, GroupCommandPolicy, Role, parse_target
from bot.settings import ConfigError, load_settings
from bot.storage import Storage
from tests.app_harness import make_settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import addressed
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, OWNER, PAIRING_CODE, STRANGER, running, tg  # noqa: F401

pytest_plugins = ["tests.storage_fixtures"]


def test_targets_parse_users_and_groups_and_refuse_anything_else() -> None:
    assert parse_target("telegram:42") == AccessTarget("user", "telegram", "42")
    assert parse_target(" group  Telegram:-100123 ") == AccessTarget("group", "telegram", "-100123")
    assert str(parse_target("group discord:77")) == "group discord:77"
    for bad in ("", "42", "telegram:", "slack:1", "telegram:abc", "group", "telegram:1 extra", "grp telegram:1"):
        with pytest.raises(ValueError, match="is not like"):
            parse_target(bad)


def group_message(user: str) -> Inbound:
    return Inbound("telegram", "group", "-100500", user, "Someone", "/new")


async def test_group_admins_may_reset_the_group_when_the_platform_names_them() -> None:
    admins = {"telegram:5"}

    async def is_admin(inbound: Inbound) -> bool:
        return inbound.identity in admins

    policy = GroupCommandPolicy(lambda identity: identity == "telegram:1", is_admin)
    new, stop, revoke = Command("new", ""), Command("stop", ""), Command("revoke", "telegram:9")
    assert await policy.refusal(new, group_message("5")) is None
    assert await policy.refusal(stop, group_message("5")) is None
    assert await policy.refusal(new, group_message("6")) is not None
    assert await policy.refusal(stop, group_message("6"), starters={"telegram:6"}) is None
    # Owner-only commands stay the owner's, whatever the group's admins say.
    assert await policy.refusal(revoke, group_message("5")) == "Only my owner can use /revoke here."
    assert await policy.refusal(revoke, group_message("1")) is None


async def test_an_admin_check_that_fails_refuses_rather_than_guesses() -> None:
    async def broken(inbound: Inbound) -> bool:
        raise ConnectionError("platform unreachable")

    policy = GroupCommandPolicy(lambda identity: False, broken)
    assert await policy.refusal(Command("new", ""), group_message("5")) is not None


async def test_roles_come_from_configuration_and_pairing(storage: Storage) -> None:
    access = AccessManager(storage, storage, owners=["telegram:1"], approvers=["telegram:2"])
    await storage.pair_user("telegram", "3", "Sam")
    assert [await access.role_of(i) for i in ("telegram:1", "console:owner", "telegram:2", "telegram:3", "telegram:4")] == [
        Role.OWNER, Role.OWNER, Role.APPROVER, Role.PAIRED, Role.STRANGER,
    ]
    assert await access.revoke(parse_target("telegram:1"), "cli") == (
        "telegram:1 is an owner (ROOST_OWNERS); change that in the configuration."
    )
    assert await access.role_of("telegram:1") is Role.OWNER


async def test_owner_revokes_a_paired_user_who_then_needs_a_new_code(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, telegram={"allowed_groups": [str(GROUP)]}) as h:
        tg.send_private(OWNER, f"/allow telegram:{STRANGER}")
        await h.says(OWNER, f"telegram:{STRANGER} may now talk to me privately.")
        tg.send_private(STRANGER, "hello", first_name="Sam")
        await h.says(STRANGER, f"echo: {addressed('Sam', 'hello')}")
        tg.send_private(OWNER, f"/revoke telegram:{STRANGER}")
        await h.bot_text(OWNER, lambda t: t.startswith(f"telegram:{STRANGER} can no longer talk to me"))
        tg.send_private(STRANGER, "still there?", first_name="Sam")
        told = await h.bot_text(STRANGER, lambda t: "pairing code" in t)
        assert PAIRING_CODE.search(told.text or "")
        assert len(fake_api.requests) == 1  # the revoked user's message reached no model

        tg.send_private(OWNER, f"/allow group telegram:{GROUP - 1}")
        await h.says(OWNER, f"I'll answer in group telegram:{GROUP - 1} when mentioned.")
        assert await h.app.storage.is_group_allowed("telegram", str(GROUP - 1))
        tg.send_private(OWNER, f"/revoke group telegram:{GROUP - 1}")
        await h.says(OWNER, f"I won't answer in group telegram:{GROUP - 1} any more.")
        assert not await h.app.storage.is_group_allowed("telegram", str(GROUP - 1))
        tg.send_private(OWNER, f"/revoke group telegram:{GROUP}")
        await h.bot_text(OWNER, lambda t: "allowed by the configuration (ROOST_TELEGRAM__ALLOWED_GROUPS)" in t)
        tg.send_private(OWNER, "/revoke someone")
        await h.bot_text(OWNER, lambda t: t.startswith("'someone' is not like") and "/revoke telegram:42" in t)

        await h.app.storage.pair_user("telegram", "555", "Pat")
        tg.send_private(555, f"/revoke telegram:{STRANGER}", first_name="Pat")
        await h.says(555, "Only my owner can use /revoke.")


async def test_configured_approvers_may_decide_approvals(tmp_path, fake_api: FakeAnthropic) -> None:
    settings = make_settings(tmp_path, fake_api, approvers=["telegram:55"])
    async with build(settings) as app:
        assert app.gate.may_decide("telegram:55") and app.gate.may_decide("telegram:1")
        assert not app.gate.may_decide("telegram:56")


def test_approvers_are_validated_like_owners(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    monkeypatch.setenv("ROOST_APPROVERS", '["telegram:55", "discord:9"]')
    assert load_settings().approvers == ["telegram:55", "discord:9"]
    monkeypatch.setenv("ROOST_APPROVERS", '["bob"]')
    with pytest.raises(ConfigError, match="ROOST_APPROVERS"):
        load_settings()
