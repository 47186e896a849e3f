"""Who gets answered where: main session, pairing, groups, mentions, topics, allowlist,
redelivery, commands — PTB over HTTP against the fake Bot API, the real app behind it."""

from __future__ import annotations

import json

from bot.commands import COMMANDS, GROUP_COMMANDS
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import addressed
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import (
    BOT_USERNAME,
    GROUP,
    MEMBER,
    OWNER,
    PAIRING_CODE,
    STRANGER,
    running,
    tg,  # noqa: F401  (fixture)
)

FORUM = -1009876543


def transcript_text(messages: list[dict]) -> str:
    return json.dumps(messages)


async def test_owner_private_chat_is_the_main_session(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "remember the blue door", first_name="Olivia")
        await h.says(OWNER, "echo: remember the blue door")
        assert "remember the blue door" in transcript_text(await h.app.storage.load_transcript("main"))
        # The typing indicator came before the answer.
        methods = [c.method for c in tg.calls if c.params.get("chat_id") == OWNER]
        assert methods.index("sendChatAction") < methods.index("sendMessage")


async def test_stranger_pairs_through_the_owners_button_then_gets_an_isolated_session(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(STRANGER, "let me in, secret-plan-x", first_name="Sam")
        told = await h.bot_text(STRANGER, lambda t: "pairing code" in t)
        code = PAIRING_CODE.search(told.text or "")
        assert code is not None, told.text
        request = await h.bot_text(OWNER, lambda t: "asks to talk to me" in t)
        buttons = request.reply_markup["inline_keyboard"]  # type: ignore[index]
        assert buttons == [[{"text": "Approve pairing", "callback_data": f"pair:{code.group()}"}]]

        query = tg.press_button(OWNER, request.message_id, OWNER, f"pair:{code.group()}", first_name="Olivia")
        await tg.await_for(lambda: tg.callback_query(query).answered)
        edited = tg.message(OWNER, request.message_id)
        assert "Paired Sam on telegram." in (edited.text or "") and edited.reply_markup is None
        await h.bot_text(STRANGER, lambda t: t.startswith("You're paired"))

        tg.send_private(STRANGER, "hello again", first_name="Sam")
        await h.says(STRANGER, f"echo: {addressed('Sam', 'hello again')}")
        assert await h.app.storage.get_session(f"dm:telegram:{STRANGER}") is not None
        assert "hello again" not in transcript_text(await h.app.storage.load_transcript("main"))
        bodies = [r.body.decode() for r in fake_api.requests]
        assert len(bodies) == 1 and "secret-plan-x" not in bodies[0]  # nothing before pairing


async def test_group_mention_is_answered_in_the_groups_sub_session_and_silence_is_kept(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    tg.set_privacy_mode(False)  # BotFather /setprivacy → Disable: the bot sees the whole group
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, MEMBER, "just chatting among ourselves", first_name="Bob")
        asked = tg.send_group(GROUP, MEMBER, "what's up?", mention=True, first_name="Bob")
        answer = await h.says(GROUP, "echo: " + addressed("Bob", f"@{BOT_USERNAME} what's up?"))
        assert answer.reply_to_message_id is not None  # quotes the question in a busy group
        assert asked
        assert len(tg.bot_messages(GROUP)) == 1  # the unmentioned message got no answer
        assert await h.app.storage.get_session(f"group:telegram:{GROUP}") is not None
        request = fake_api.requests[-1].body.decode()
        assert "just chatting among ourselves" in request  # kept as read-only context


async def test_a_reply_to_the_bot_counts_as_a_mention(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_group(GROUP, MEMBER, "first", mention=True, first_name="Bob")
        first = await h.says(GROUP, f"echo: {addressed('Bob', f'@{BOT_USERNAME} first')}")
        tg.send_group(GROUP, MEMBER, "and a follow-up", reply_to_bot_message_id=first.message_id, first_name="Bob")
        await h.says(GROUP, f"echo: {addressed('Bob', 'and a follow-up')}")


async def test_forum_topic_gets_its_own_session_and_answers_in_its_thread(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        # Topic messages reply to the topic's creation message: not a mention.
        tg.send_group(FORUM, MEMBER, "talking in topic 7", thread_id=7, first_name="Bob")
        tg.send_group(FORUM, MEMBER, "hi topic", mention=True, thread_id=7, first_name="Bob")
        answer = await h.says(FORUM, f"echo: {addressed('Bob', f'@{BOT_USERNAME} hi topic')}")
        assert answer.thread_id == 7
        tg.send_group(FORUM, MEMBER, "hi general", mention=True, first_name="Bob")
        general = await h.says(FORUM, f"echo: {addressed('Bob', f'@{BOT_USERNAME} hi general')}")
        assert general.thread_id is None
        assert len(tg.bot_messages(FORUM)) == 2
        assert await h.app.storage.get_session(f"group:telegram:{FORUM}:7") is not None
        assert await h.app.storage.get_session(f"group:telegram:{FORUM}") is not None


async def test_topic_created_by_the_bot_is_not_a_reply_to_the_bot(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Every topic message "replies" to the topic's creation message; when the bot created
    the topic, that creation message is the bot's — still not a mention."""
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.add_chat(FORUM, title="Forum", is_forum=True)
        bot_user = {"id": 123456, "is_bot": True, "first_name": "Roost", "username": BOT_USERNAME}
        chat = {"id": FORUM, "type": "supergroup", "title": "Forum", "is_forum": True}
        user = {"id": MEMBER, "is_bot": False, "first_name": "Bob"}
        tg.push_update({"message": {
            "message_id": 50, "date": 1_700_000_000, "chat": chat, "from": user,
            "text": "chatter in the bot's topic", "message_thread_id": 9, "is_topic_message": True,
            "reply_to_message": {
                "message_id": 9, "date": 1_700_000_000, "chat": chat, "from": bot_user,
                "message_thread_id": 9, "is_topic_message": True,
                "forum_topic_created": {"name": "Roost's topic", "icon_color": 7322096},
            },
        }})
        tg.send_group(FORUM, MEMBER, "now for real", mention=True, thread_id=9, first_name="Bob")
        await h.says(FORUM, f"echo: {addressed('Bob', f'@{BOT_USERNAME} now for real')}")
        assert len(tg.bot_messages(FORUM)) == 1
        assert "chatter in the bot's topic" in fake_api.requests[-1].body.decode()  # buffered, not answered


async def test_group_not_allowed_is_ignored_until_the_owner_allows_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, telegram={"allowed_groups": []}) as h:
        tg.send_group(GROUP, MEMBER, "anyone home?", mention=True, first_name="Bob")
        tg.send_group(GROUP, MEMBER, "/allow", first_name="Bob")
        await h.says(GROUP, "Only my owner can change where I answer.")
        tg.send_group(GROUP, OWNER, f"/allow@{BOT_USERNAME}", first_name="Olivia")
        await h.says(GROUP, "I'll answer in this group when mentioned.")
        assert len(tg.bot_messages(GROUP)) == 2 and not fake_api.requests  # "anyone home?" ignored
        tg.send_group(GROUP, MEMBER, "now?", mention=True, first_name="Bob")
        await h.says(GROUP, f"echo: {addressed('Bob', f'@{BOT_USERNAME} now?')}")


async def test_a_command_for_another_bot_is_not_obeyed(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, telegram={"allowed_groups": []}) as h:
        tg.send_group(GROUP, OWNER, "/allow@some_other_bot", first_name="Olivia")
        tg.send_group(GROUP, OWNER, f"/disallow@{BOT_USERNAME}", first_name="Olivia")  # ours
        await h.says(GROUP, "I won't answer in this group any more.")
        assert [m.text for m in tg.bot_messages(GROUP)] == ["I won't answer in this group any more."]


async def test_redelivered_update_is_answered_once(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        first = tg.send_private(OWNER, "only once please")
        await h.says(OWNER, "echo: only once please")
        tg.redeliver(first)
        tg.send_private(OWNER, "the next one")  # same chat: processed after the redelivery
        await h.says(OWNER, "echo: the next one")
        texts = [m.text for m in tg.bot_messages(OWNER)]
        assert texts == ["echo: only once please", "echo: the next one"]
        assert len(fake_api.requests) == 2


async def test_commands_are_registered_and_answered(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        registered = await tg.await_for(tg.commands)
        assert {c["command"] for c in registered} == set(COMMANDS) | set(GROUP_COMMANDS)
        expected = {
            "/help": lambda t: t.startswith("I'm Roost") and "/status" in t,
            "/new": lambda t: t.startswith("Started a fresh session"),
            "/stop": lambda t: t == "Nothing is running.",
            "/status": lambda t: t.startswith("Model: claude-test") and "Session: main (main)" in t,
            "/model": lambda t: t.startswith("Current model: claude-test"),
            "/frobnicate": lambda t: t.startswith("Unknown command /frobnicate") and "/help" in t,
        }
        for command, check in expected.items():
            tg.send_private(OWNER, command)
            await h.bot_text(OWNER, check)
        tg.send_group(GROUP, MEMBER, f"/help@{BOT_USERNAME}", first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("I'm Roost"))
        tg.send_group(GROUP, MEMBER, "/help@some_other_bot", first_name="Bob")
        tg.send_group(GROUP, MEMBER, "/status", first_name="Bob")  # a bare command is for us
        await h.bot_text(GROUP, lambda t: t.startswith("Model: claude-test"))
        assert len(tg.bot_messages(GROUP)) == 2
        # Commands never reach the model (/model reads only its catalogue, GET /v1/models).
        assert not [r for r in fake_api.requests if r.path.startswith("/v1/messages")]


async def test_odd_updates_are_skipped_and_the_bot_keeps_answering(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        chat = {"id": OWNER, "type": "private", "first_name": "Olivia"}
        user = {"id": OWNER, "is_bot": False, "first_name": "Olivia"}
        channel = {"id": -1005550000, "type": "channel", "title": "News"}
        base = {"date": 1_700_000_000, "chat": chat, "from": user}
        for raw in (
            {"edited_message": {**base, "message_id": 901, "edit_date": 1_700_000_001, "text": "edited"}},
            # (A photo is no longer odd: test_telegram_media.py. A sticker still is.)
            {"message": {**base, "message_id": 902, "sticker": {
                "file_id": "p", "file_unique_id": "u", "type": "regular", "width": 1, "height": 1,
                "is_animated": False, "is_video": False}}},
            {"message": {**base, "message_id": 903, "text": "@x",
                         "entities": [{"type": "mention", "offset": 40, "length": 9}]}},
            {"message": {"message_id": 904, "date": 1_700_000_000, "chat": chat, "text": "no sender"}},
            {"channel_post": {"message_id": 905, "date": 1_700_000_000, "chat": channel, "text": "post"}},
            {"my_chat_member": {"chat": chat, "from": user, "date": 1_700_000_000,
                                "old_chat_member": {"status": "member", "user": user},
                                "new_chat_member": {"status": "kicked", "user": user, "until_date": 0}}},
        ):
            tg.push_update(raw)
        tg.send_private(OWNER, "still there?")
        await h.says(OWNER, "echo: still there?")
        # Only "@x" (a text message with a broken entity) was a message worth answering.
        await h.says(OWNER, "echo: @x")
        assert len(fake_api.requests) == 2


async def test_forged_or_stale_button_gets_a_polite_answer(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "hi")
        answer = await h.says(OWNER, "echo: hi")
        for data in ("k:0123456789abcdef", "nonsense", "ap:not-a-real-id:o"):
            query = tg.press_button(OWNER, answer.message_id, OWNER, data, require_button=False)
            state = await tg.await_for(lambda q=query: tg.callback_query(q).answered and tg.callback_query(q))
            assert state.answer and state.answer.get("text"), data
        assert tg.message(OWNER, answer.message_id).text == "echo: hi"  # nothing changed
