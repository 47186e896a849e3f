"""The fake Bot API proven against the real python-telegram-bot over real HTTP."""

from __future__ import annotations

import datetime as dtm
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
)
from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter
from telegram.ext import Application, ApplicationBuilder
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
