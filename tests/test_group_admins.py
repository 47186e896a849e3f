"""A group's admins, as Telegram says (getChatMember), may use /new and /stop in the group;
plain members may not — through the real app, PTB against the fake Bot API."""

from __future__ import annotations

import json

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Stall, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import BOT_USERNAME, GROUP, MEMBER, running, tg  # noqa: F401

ADMIN = 79
PLAIN = 78
KEY = f"group:telegram:{GROUP}"


def count(tg: FakeTelegram, start: str) -> int:
    return sum(1 for m in tg.bot_messages(GROUP) if (m.text or "").startswith(start))


async def test_a_group_admin_not_the_owner_may_stop_and_new_a_plain_member_may_not(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    tg.set_chat_admin(GROUP, ADMIN)
    fake_api.script(Reply(Text("Thinking about the heron question"), Stall(30)))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, PLAIN, "hello all", first_name="Mallory")  # Mallory is a member
        tg.send_group(GROUP, MEMBER, "the code word is heron, think", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("Thinking about the heron question"))

        tg.send_group(GROUP, PLAIN, f"/stop@{BOT_USERNAME}", first_name="Mallory")
        await h.says(GROUP, "Only the person who asked, my owner or this group's admins can stop this answer.")
        assert h.app.conversations.lanes.is_busy(KEY)
        tg.send_group(GROUP, ADMIN, f"/stop@{BOT_USERNAME}", first_name="Ada")
        await h.says(GROUP, "Stopped.")
        await h.app.conversations.lanes.drain()

        tg.send_group(GROUP, PLAIN, f"/new@{BOT_USERNAME}", first_name="Mallory")
        await h.says(GROUP, "Only my owner or this group's admins can use /new here.")
        assert "heron" in json.dumps(await h.app.storage.load_transcript(KEY))
        tg.send_group(GROUP, ADMIN, f"/new@{BOT_USERNAME}", first_name="Ada")
        await h.bot_text(GROUP, lambda t: t.startswith("Started a fresh session"))
        assert "heron" not in json.dumps(await h.app.storage.load_transcript(KEY))

        # Telegram was asked once per (group, person) — the answer is cached for a minute.
        asked = sorted(c.params["user_id"] for c in tg.calls_of("getChatMember"))
        assert asked == [PLAIN, ADMIN]
        assert all(c.params["chat_id"] == GROUP for c in tg.calls_of("getChatMember"))


async def test_an_admin_check_telegram_fails_refuses_and_is_asked_again_next_time(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    tg.set_chat_admin(GROUP, ADMIN, "creator")
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, ADMIN, "hi", first_name="Ada")
        tg.fail_next("getChatMember", status=502)
        tg.send_group(GROUP, ADMIN, f"/new@{BOT_USERNAME}", first_name="Ada")
        await h.says(GROUP, "Only my owner or this group's admins can use /new here.")  # refused, not guessed
        tg.send_group(GROUP, ADMIN, f"/new@{BOT_USERNAME}", first_name="Ada")
        await h.bot_text(GROUP, lambda t: t.startswith("Started a fresh session"))
        assert len(tg.calls_of("getChatMember")) == 2


async def test_fake_get_chat_member_answers_like_telegram(tg: FakeTelegram) -> None:
    """PTB parses each answer into the ChatMember subclass Telegram's status names."""
    from telegram import Bot, ChatMemberAdministrator, ChatMemberLeft, ChatMemberMember, ChatMemberOwner
    from telegram.error import BadRequest
    from telegram.request import HTTPXRequest

    tg.set_chat_admin(GROUP, ADMIN)
    tg.set_chat_admin(GROUP, 80, "creator")
    for user in (ADMIN, 80, PLAIN):
        tg.send_group(GROUP, user, "hi")
    tg.send_group(-1009, MEMBER, "elsewhere")
    async with Bot(tg.token, base_url=tg.base_url, request=HTTPXRequest(httpx_kwargs={"verify": False})) as bot:
        assert isinstance(await bot.get_chat_member(GROUP, ADMIN), ChatMemberAdministrator)
        assert isinstance(await bot.get_chat_member(GROUP, 80), ChatMemberOwner)
        assert isinstance(await bot.get_chat_member(GROUP, PLAIN), ChatMemberMember)
        assert isinstance(await bot.get_chat_member(GROUP, MEMBER), ChatMemberLeft)  # never wrote here
        tg.set_chat_admin(GROUP, ADMIN, None)
        assert isinstance(await bot.get_chat_member(GROUP, ADMIN), ChatMemberMember)
        try:
            await bot.get_chat_member(GROUP, 999)
        except BadRequest as exc:
            assert "user not found" in exc.message.lower()
        else:
            raise AssertionError("an unknown user must be a Bad Request")
