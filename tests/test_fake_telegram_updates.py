"""The fake Bot API proven against the real python-telegram-bot over real HTTP: inbound
updates, long polling, webhooks and the real Application (the calls the bot makes are in
tests/test_fake_telegram.py, whose fixtures these share)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
from telegram import Bot, MessageEntity, Update
from telegram.error import BadRequest, Conflict, NetworkError, RetryAfter, TimedOut
from telegram.ext import ContextTypes, MessageHandler, filters
from telegram.request import HTTPXRequest

from tests.fakes.telegram_api import FakeTelegram
from tests.test_fake_telegram import OWNER, _app, _bot, _seconds, bot, tg  # noqa: F401  (fixtures)


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
