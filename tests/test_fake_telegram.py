"""The fake Bot API proven against the real python-telegram-bot over real HTTP."""

from __future__ import annotations

import asyncio
import datetime as dtm
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    Update,
)
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter, TimedOut
from telegram.ext import Application, ApplicationBuilder, ContextTypes, MessageHandler, filters
from telegram.request import HTTPXRequest

from tests.fakes.telegram_api import FakeTelegram

TOKEN = "123:ABC"
OWNER = 42


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN, bot_username="roost_bot") as fake:
        yield fake


def _plain_http() -> HTTPXRequest:
    """The fake speaks plain HTTP: skipping the CA bundle saves ~0.1 s per Bot."""
    return HTTPXRequest(httpx_kwargs={"verify": False})


def _bot(tg: FakeTelegram, token: str = TOKEN) -> Bot:
    return Bot(
        token,
        base_url=tg.base_url,
        base_file_url=tg.base_file_url,
        request=_plain_http(),
        get_updates_request=_plain_http(),
    )


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with _bot(tg) as real_bot:
        yield real_bot


def _seconds(retry_after: int | dtm.timedelta) -> float:
    return (
        retry_after.total_seconds()
        if isinstance(retry_after, dtm.timedelta)
        else float(retry_after)
    )


def _app(tg: FakeTelegram) -> Application:  # type: ignore[type-arg]
    return (
        ApplicationBuilder()
        .token(TOKEN)
        .base_url(tg.base_url)
        .base_file_url(tg.base_file_url)
        .build()
    )


# ---- wire basics --------------------------------------------------------------------------
async def test_bot_initialises_with_get_me_and_wrong_token_is_401(
    tg: FakeTelegram, bot: Bot
) -> None:
    assert bot.username == "roost_bot" and bot.id == 123
    assert [c.method for c in tg.calls] == ["getMe"]
    with pytest.raises(InvalidToken):
        async with _bot(tg, "123:WRONG"):
            pass
    async with httpx.AsyncClient() as client:
        wrong = await client.post(f"{tg.base_url}123:WRONG/getMe")
        unknown = await client.post(f"{tg.api_url}/sendTelepathy")
        lower = await client.get(f"{tg.api_url}/getme")
    assert (wrong.status_code, wrong.json()) == (
        401,
        {"ok": False, "error_code": 401, "description": "Unauthorized"},
    )
    assert (unknown.status_code, unknown.json()["description"]) == (404, "Not Found")
    assert lower.json()["result"]["username"] == "roost_bot"  # method names are case-insensitive


async def test_ptb_sends_form_fields_and_plain_json_also_works(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    await bot.send_message(
        OWNER, "bold", entities=[MessageEntity("bold", 0, 4)], disable_notification=True
    )
    call = tg.calls_of("sendMessage")[0]
    assert call.encoding == "form"
    assert call.params == {
        "chat_id": OWNER,
        "text": "bold",
        "disable_notification": True,
        "entities": [{"type": "bold", "offset": 0, "length": 4}],
    }
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            f"{tg.api_url}/sendMessage", json={"chat_id": OWNER, "text": "json client"}
        )
    assert resp.json()["ok"] and tg.calls_of("sendMessage")[1].encoding == "json"
    assert [m.text for m in tg.bot_messages(OWNER)] == ["bold", "json client"]


async def test_unknown_chat_is_chat_not_found(tg: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(999, "hello?")


# ---- send / edit / delete -----------------------------------------------------------------
async def test_edit_with_identical_content_is_message_not_modified(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_chat(OWNER)
    sent = await bot.send_message(OWNER, "draft")
    edited = await bot.edit_message_text("draft, longer", OWNER, sent.message_id)
    assert isinstance(edited, Message) and edited.text == "draft, longer"
    with pytest.raises(BadRequest) as err:
        await bot.edit_message_text("draft, longer", OWNER, sent.message_id)
    assert err.value.message.lower().startswith(
        "message is not modified: specified new message content"
    )
    failed = tg.calls_of("editMessageText")[-1]
    assert (failed.status, failed.description) == (
        400,
        "Bad Request: message is not modified: specified new "
        "message content and reply markup are exactly the same as "
        "a current content and reply markup of the message",
    )
    [msg] = tg.bot_messages(OWNER)
    assert msg.text == "draft, longer" and [e.text for e in msg.edits] == ["draft"]


async def test_text_is_trimmed_so_trailing_space_edit_is_not_modified(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_chat(OWNER)
    sent = await bot.send_message(OWNER, "  hi there \n")
    assert sent.text == "hi there"
    with pytest.raises(BadRequest, match="not modified"):
        await bot.edit_message_text("hi there ", OWNER, sent.message_id)
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(OWNER, " \n ")


async def test_edit_without_reply_markup_removes_the_keyboard(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="a:1")]])
    sent = await bot.send_message(OWNER, "card", reply_markup=keyboard)
    with pytest.raises(BadRequest, match="not modified"):
        await bot.edit_message_reply_markup(OWNER, sent.message_id, reply_markup=keyboard)
    await bot.edit_message_text("card", OWNER, sent.message_id)  # same text, keyboard dropped
    assert tg.bot_messages(OWNER)[0].reply_markup is None


async def test_edit_and_delete_of_unknown_messages(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", OWNER, 77)
    sent = await bot.send_message(OWNER, "bye")
    assert await bot.delete_message(OWNER, sent.message_id) is True
    with pytest.raises(BadRequest, match="Message to delete not found"):
        await bot.delete_message(OWNER, sent.message_id)
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("again", OWNER, sent.message_id)
    assert tg.bot_messages(OWNER) == [] and tg.messages(OWNER)[0].deleted


# ---- limits and entities --------------------------------------------------------------------
async def test_4096_limit_counts_utf16_units_after_parsing(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    await bot.send_message(OWNER, "😀" * 2048)  # 2048 characters, 4096 UTF-16 units
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(OWNER, "😀" * 2048 + "a")
    with pytest.raises(BadRequest, match="Message is too long"):
        await bot.send_message(OWNER, "a" * 4097)
    await bot.send_message(
        OWNER, "*" + "a" * 4096 + "*", parse_mode="MarkdownV2"
    )  # 4098 raw, 4096 parsed
    await bot.send_message(OWNER, "\\." * 4096, parse_mode="MarkdownV2")
    assert [len(m.text or "") for m in tg.bot_messages(OWNER)] == [2048, 4096, 4096]


@pytest.mark.parametrize(
    ("entity", "detail"),
    [
        (MessageEntity("bold", 3, 3), "outside the text"),
        (MessageEntity("bold", 0, 0), "outside the text"),
        (MessageEntity("sparkle", 0, 1), "unsupported type"),
        (MessageEntity("text_link", 0, 2), "needs a valid url"),
        (MessageEntity("italic", 1, 1), "splits a surrogate pair"),
    ],
)
async def test_invalid_entities_are_rejected(
    tg: FakeTelegram, bot: Bot, entity: MessageEntity, detail: str
) -> None:
    tg.add_chat(OWNER)
    with pytest.raises(BadRequest, match="Can't parse entities") as err:
        await bot.send_message(OWNER, "😀ab", entities=[entity])  # 4 UTF-16 units
    assert detail in err.value.message
    assert tg.bot_messages(OWNER) == []


async def test_valid_entities_and_parse_modes_are_stored(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    pre = MessageEntity("pre", 0, 5, language="python")
    link = MessageEntity("text_link", 6, 4, url="https://example.org")
    await bot.send_message(OWNER, "x = 1 docs", entities=[link, pre])
    await bot.send_message(
        OWNER, "*b* _i_ `c\\`` [l](https://e.org/a\\)b)", parse_mode="MarkdownV2"
    )
    await bot.send_message(
        OWNER,
        '<b>b</b> &lt;i&gt; <pre><code class="language-sh">ls</code></pre>',
        parse_mode="HTML",
    )
    first, second, third = tg.bot_messages(OWNER)
    assert first.entities == [
        {"type": "pre", "offset": 0, "length": 5, "language": "python"},
        {"type": "text_link", "offset": 6, "length": 4, "url": "https://example.org"},
    ]
    assert second.text == "b i c` l"
    assert [e["type"] for e in second.entities] == ["bold", "italic", "code", "text_link"]
    assert second.entities[-1]["url"] == "https://e.org/a)b"
    assert third.text == "b <i> ls" and third.entities[-1] == {
        "type": "pre",
        "offset": 6,
        "length": 2,
        "language": "sh",
    }


@pytest.mark.parametrize(
    ("text", "mode", "detail"),
    [
        ("Done.", "MarkdownV2", "character '.' is reserved"),
        ("*unclosed", "MarkdownV2", "can't find end of the entity"),
        ("a - b", "MarkdownV2", "character '-' is reserved"),
        ("<b>unclosed", "HTML", 'can\'t find end tag corresponding to start tag "b"'),
        ("<b><i>x</b></i>", "HTML", "unmatched end tag"),
        ("<blink>x</blink>", "HTML", 'unsupported start tag "blink"'),
        ("1 < 2", "HTML", 'unsupported start tag ""'),
    ],
)
async def test_bad_markup_is_cant_parse_entities(
    tg: FakeTelegram, bot: Bot, text: str, mode: str, detail: str
) -> None:
    tg.add_chat(OWNER)
    with pytest.raises(BadRequest) as err:
        await bot.send_message(OWNER, text, parse_mode=mode)
    assert err.value.message.lower().startswith("can't parse entities: ")
    assert detail in err.value.message.lower()


# ---- fault injection ------------------------------------------------------------------------
async def test_429_surfaces_as_retry_after_and_changes_nothing(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    tg.fail_next("sendMessage", retry_after=2)
    with pytest.raises(RetryAfter) as err:
        await bot.send_message(OWNER, "first try")
    assert _seconds(err.value.retry_after) == 2
    assert tg.bot_messages(OWNER) == []
    rejected = tg.calls_of("sendMessage")[0]
    assert (rejected.status, rejected.injected, rejected.description) == (
        429,
        True,
        "Too Many Requests: retry after 2",
    )
    await bot.send_message(OWNER, "second try")  # count=1: the rule is used up
    assert [m.text for m in tg.bot_messages(OWNER)] == ["second try"]


async def test_injected_400_and_5xx_and_chat_filter(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    tg.add_chat(7)
    tg.fail_next(
        "editMessageText", status=400, description="Bad Request: can't parse entities: boom"
    )
    tg.fail_next("sendMessage", status=500, chat_id=7, count=2)
    sent = await bot.send_message(OWNER, "unaffected chat")
    with pytest.raises(BadRequest, match="Can't parse entities: boom"):
        await bot.edit_message_text("new", OWNER, sent.message_id)
    for _ in range(2):
        with pytest.raises(NetworkError, match="Internal Server Error"):
            await bot.send_message(7, "x")
    await bot.send_message(7, "third time lucky")
    assert [m.text for m in tg.bot_messages(7)] == ["third time lucky"]


async def test_flood_limit_rejects_fast_message_changes_per_chat(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_chat(OWNER)
    tg.add_chat(7)
    tg.flood_limit(30.0)
    sent = await bot.send_message(OWNER, "one")
    await bot.send_message(7, "other chat is paced separately")
    with pytest.raises(RetryAfter) as err:
        await bot.edit_message_text("two", OWNER, sent.message_id)
    assert 29 <= _seconds(err.value.retry_after) <= 30
    assert [c.injected for c in tg.calls_of("editMessageText")] == [True]
    assert tg.bot_messages(OWNER)[0].text == "one"
    await bot.send_chat_action(OWNER, "typing")  # not a message change: never paced


# ---- buttons, documents, commands ---------------------------------------------------------
async def test_button_callback_round_trip(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    keyboard = InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton("Approve once", callback_data="ap:1:once"),
                InlineKeyboardButton("Deny", callback_data="ap:1:deny"),
            ]
        ]
    )
    card = await bot.send_message(OWNER, "Run `ls`?", reply_markup=keyboard)
    query_id = tg.press_button(OWNER, card.message_id, OWNER, "ap:1:deny")
    [update] = await bot.get_updates(timeout=0)
    query = update.callback_query
    assert query is not None and query.id == query_id and query.data == "ap:1:deny"
    assert query.from_user.id == OWNER and query.message is not None
    assert isinstance(query.message, Message) and query.message.message_id == card.message_id
    assert query.message.reply_markup == keyboard
    assert await bot.answer_callback_query(query_id, text="Denied") is True
    assert tg.callback_query(query_id).answer == {"text": "Denied"}
    with pytest.raises(BadRequest, match="Query is too old"):
        await bot.answer_callback_query(query_id)
    with pytest.raises(ValueError):
        tg.press_button(OWNER, card.message_id, OWNER, "forged")
    too_long = InlineKeyboardMarkup(
        [[InlineKeyboardButton("x", callback_data="é" * 33)]]
    )  # 66 bytes
    with pytest.raises(BadRequest, match="Button_data_invalid"):
        await bot.send_message(OWNER, "card", reply_markup=too_long)


async def test_send_document_multipart_keeps_name_bytes_caption(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    payload = b"rm -rf build/ && make all\n" * 100
    sent = await bot.send_document(OWNER, payload, filename="command.sh", caption="Full command")
    call = tg.calls_of("sendDocument")[0]
    assert call.encoding == "multipart"
    upload = call.params["document"]
    assert (upload.filename, upload.data) == ("command.sh", payload)
    [msg] = tg.bot_messages(OWNER)
    assert msg.caption == "Full command" and msg.document is not None
    assert (msg.document.file_name, msg.document.data) == ("command.sh", payload)
    assert sent.document is not None
    downloaded = await (await bot.get_file(sent.document.file_id)).download_as_bytearray()
    assert bytes(downloaded) == payload
    with pytest.raises(BadRequest, match="Message caption is too long"):
        await bot.send_document(OWNER, b"x", filename="a.txt", caption="c" * 1025)


async def test_commands_and_chat_action(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(OWNER)
    await bot.set_my_commands(
        [BotCommand("stop", "Stop the current run"), BotCommand("new", "Fresh session")]
    )
    assert [c.command for c in await bot.get_my_commands()] == ["stop", "new"]
    assert tg.commands()[0] == {"command": "stop", "description": "Stop the current run"}
    with pytest.raises(BadRequest, match="Bot_command_invalid"):
        await bot.set_my_commands([BotCommand("Bad-Name", "x")])
    await bot.delete_my_commands()
    assert await bot.get_my_commands() == ()
    assert await bot.send_chat_action(OWNER, "typing") is True
    with pytest.raises(BadRequest, match="Wrong parameter action"):
        await bot.send_chat_action(OWNER, "dancing")


# ---- inbound updates and long polling -------------------------------------------------------
async def test_long_poll_returns_as_soon_as_an_update_arrives(tg: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=20))
    await tg.await_for(lambda: tg.is_polling)
    started = time.monotonic()
    update_id = tg.send_private(OWNER, "hello", first_name="Owner", username="owner")
    [update] = await asyncio.wait_for(poll, 5)
    assert time.monotonic() - started < 5  # woken by the update, not by the 20 s timeout
    assert update.update_id == update_id and update.message is not None
    assert update.message.text == "hello" and update.message.chat.type == "private"
    assert update.message.from_user is not None and update.message.from_user.username == "owner"


async def test_get_updates_offset_limit_timeout_and_redelivery(tg: FakeTelegram, bot: Bot) -> None:
    ids = [tg.send_private(OWNER, f"m{n}") for n in range(3)]
    assert [u.update_id for u in await bot.get_updates(limit=2)] == ids[:2]
    assert [u.update_id for u in await bot.get_updates(offset=ids[1] + 1)] == ids[2:]
    assert await bot.get_updates(offset=ids[2] + 1, timeout=0) == ()
    tg.redeliver(ids[0])
    [again] = await bot.get_updates(offset=ids[2] + 1, timeout=0)
    assert again.update_id == ids[0] and again.message is not None and again.message.text == "m0"
    tg.send_private(OWNER, "not wanted")
    assert await bot.get_updates(offset=ids[2] + 1, allowed_updates=["callback_query"]) == ()
    assert tg.pending_updates == []  # a disallowed update is dropped, as by Telegram


async def test_privacy_mode_withholds_unaddressed_group_messages(tg: FakeTelegram, bot: Bot) -> None:
    group = -1001234567890
    me = await bot.get_me()
    assert me.can_read_all_group_messages is False  # Telegram's default: privacy mode on
    tg.send_group(group, 5, "chatting among ourselves")
    tg.send_group(group, 5, "/help")  # a bare command: for us
    tg.send_group(group, 5, "/help@other_bot")
    tg.send_group(group, 5, "hey you", mention=True)
    tg.send_group(group, 5, "a topic message", thread_id=9)  # a reply to the topic, not to us
    texts = [u.message.text for u in await bot.get_updates() if u.message]
    assert texts == ["/help", "@roost_bot hey you"]
    tg.set_privacy_mode(False)
    assert (await bot.get_me()).can_read_all_group_messages is True
    tg.send_group(group, 5, "now everything")
    (update,) = await bot.get_updates(offset=-1)
    assert update.message is not None and update.message.text == "now everything"


async def test_flood_limits_allow_a_burst_then_one_a_second_and_20_a_minute_in_groups(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_chat(OWNER)
    tg.flood_limit(60.0, burst=3)  # a slow refill: the burst alone is measured
    for n in range(3):
        await bot.send_message(OWNER, f"burst {n}")
    with pytest.raises(RetryAfter) as refused:
        await bot.send_message(OWNER, "one too many")
    assert _seconds(refused.value.retry_after) >= 1
    group = -100777
    tg.add_chat(group)
    tg.flood_limit(0.001, burst=100, group_per_minute=20)
    for n in range(20):
        await bot.send_message(group, f"g{n}")
    with pytest.raises(RetryAfter):
        await bot.send_message(group, "the 21st this minute")
    await bot.send_message(OWNER, "private chats have no per-minute cap")


async def test_a_dropped_response_still_took_effect(tg: FakeTelegram) -> None:
    """apply-then-drop: the message exists, the client only sees a broken connection
    (reset) or its read timeout (stall); apply=False loses the request itself."""
    tg.add_chat(OWNER)
    request = HTTPXRequest(read_timeout=0.5, httpx_kwargs={"verify": False})
    async with Bot(tg.token, base_url=tg.base_url, request=request) as bot:
        tg.drop_response_next("sendMessage")
        with pytest.raises(NetworkError, match="disconnected"):
            await bot.send_message(OWNER, "reset after applying")
        tg.drop_response_next("sendMessage", how="stall")
        with pytest.raises(TimedOut):
            await bot.send_message(OWNER, "stalled after applying")
        tg.drop_response_next("sendMessage", apply=False)
        with pytest.raises(NetworkError):
            await bot.send_message(OWNER, "lost before applying")
        await bot.send_message(OWNER, "answered")
    assert [m.text for m in tg.bot_messages(OWNER)] == [
        "reset after applying", "stalled after applying", "answered"
    ]
    assert [c.dropped for c in tg.calls_of("sendMessage")] == [True, True, True, False]


async def test_group_mention_command_and_forum_topic(tg: FakeTelegram, bot: Bot) -> None:
    group = -1001234567890
    tg.send_group(group, 5, "what's up?", title="Friends", mention=True, thread_id=11)
    tg.send_group(group, 5, "/stop@roost_bot", thread_id=11)
    first, second = await bot.get_updates()
    msg = first.message
    assert msg is not None and msg.text == "@roost_bot what's up?"
    assert msg.parse_entities([MessageEntity.MENTION]) == {
        MessageEntity("mention", 0, 10): "@roost_bot"
    }
    assert msg.chat.is_forum and msg.is_topic_message and msg.message_thread_id == 11
    assert msg.reply_to_message is not None and msg.reply_to_message.forum_topic_created is not None
    assert second.message is not None and second.message.entities == (
        MessageEntity("bot_command", 0, 15),
    )
    await bot.send_message(group, "in topic", message_thread_id=11)
    assert [m.text for m in tg.bot_messages(group, thread_id=11)] == ["in topic"]
    reply_to = tg.bot_messages(group)[0].message_id
    tg.send_group(group, 6, "thanks", reply_to_bot_message_id=reply_to, thread_id=11)
    plain_group = -555
    tg.set_privacy_mode(False)  # unaddressed group messages reach the bot only without privacy mode
    tg.send_group(plain_group, 5, "hi")
    updates = await bot.get_updates(offset=second.update_id + 1)
    assert updates[0].message is not None and updates[0].message.reply_to_message is not None
    assert updates[0].message.reply_to_message.from_user is not None
    assert updates[0].message.reply_to_message.from_user.is_bot
    assert updates[1].message is not None and updates[1].message.chat.type == "group"
    with pytest.raises(BadRequest, match="Message thread not found"):
        await bot.send_message(plain_group, "x", message_thread_id=3)


async def test_push_update_delivers_odd_payloads(tg: FakeTelegram, bot: Bot) -> None:
    uid = tg.push_update({"something_new": {"x": 1}})
    [update] = await bot.get_updates()
    assert update.update_id == uid and update.message is None
    assert update.api_kwargs == {"something_new": {"x": 1}}


async def test_second_poller_and_webhook_conflict(tg: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=20))
    await tg.await_for(lambda: tg.is_polling)
    async with _bot(tg) as other:
        await other.get_updates(timeout=0)
    with pytest.raises(Conflict, match="terminated by other getUpdates request"):
        await first
    assert await bot.set_webhook("http://127.0.0.1:9/hook") is True
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates()
    assert (await bot.get_webhook_info()).url == "http://127.0.0.1:9/hook"
    await bot.delete_webhook()
    assert await bot.get_updates(timeout=0) == ()


def test_sync_wait_for_from_a_plain_thread(tg: FakeTelegram) -> None:
    tg.add_chat(OWNER)

    def client() -> None:
        httpx.post(
            f"{tg.api_url}/sendMessage", data={"chat_id": str(OWNER), "text": "from a thread"}
        )

    worker = threading.Thread(target=client)
    worker.start()
    [msg] = tg.wait_for(lambda: tg.bot_messages(OWNER), timeout=5)
    worker.join()
    assert msg.text == "from a thread"
    with pytest.raises(TimeoutError, match="sendMessage -> ok"):
        tg.wait_for(lambda: len(tg.bot_messages(OWNER)) > 1, timeout=0.05)


# ---- the real Application -------------------------------------------------------------------
async def _echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.effective_message is not None
    await update.effective_message.reply_text(f"echo: {update.effective_message.text}")


async def test_application_polling_receives_and_replies(tg: FakeTelegram) -> None:
    app = _app(tg)
    app.add_handler(MessageHandler(filters.TEXT, _echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=10)
        tg.send_private(OWNER, "ping")
        [reply] = await tg.await_for(lambda: tg.bot_messages(OWNER))
        await app.updater.stop()
        await app.stop()
    assert reply.text == "echo: ping"
    methods = [c.method for c in tg.calls if c.ok]
    assert methods[:2] == ["getMe", "deleteWebhook"] and "sendMessage" in methods
    assert tg.pending_updates == []  # the shutdown getUpdates confirmed the update


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_webhook_delivery_with_secret(tg: FakeTelegram) -> None:
    port = _free_port()
    app = _app(tg)
    app.add_handler(MessageHandler(filters.TEXT, _echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_webhook(
            listen="127.0.0.1",
            port=port,
            url_path="tg",
            webhook_url=f"http://127.0.0.1:{port}/tg",
            secret_token="s3cret",
        )
        assert (
            tg.webhook.url == f"http://127.0.0.1:{port}/tg" and tg.webhook.secret_token == "s3cret"
        )
        update_id = tg.send_private(OWNER, "via webhook")
        [reply] = await tg.await_for(lambda: tg.bot_messages(OWNER))
        assert await tg.apost_to_webhook(update_id, secret="wrong") == 403
        assert await tg.apost_to_webhook(update_id, secret=None) == 403
        await app.updater.stop()
        await app.stop()
    assert reply.text == "echo: via webhook"
    assert [(d.update_id, d.secret, d.status) for d in tg.webhook_responses] == [
        (update_id, "s3cret", 200),
        (update_id, "wrong", 403),
        (update_id, None, 403),
    ]
    assert len(tg.bot_messages(OWNER)) == 1  # rejected posts were not handled


async def test_unreachable_webhook_is_recorded_and_redelivery_posts_again(
    tg: FakeTelegram, bot: Bot
) -> None:
    await bot.set_webhook(f"http://127.0.0.1:{_free_port()}/hook", secret_token="abc")
    update_id = tg.send_private(OWNER, "lost?")
    [failed] = await tg.await_for(lambda: tg.webhook_responses)
    assert (failed.update_id, failed.status, failed.secret) == (update_id, None, "abc")
    assert (await bot.get_webhook_info()).last_error_message
    tg.redeliver(update_id)
    await tg.await_for(lambda: len(tg.webhook_responses) == 2)
    assert tg.webhook_responses[1].update_id == update_id
