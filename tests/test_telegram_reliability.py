"""Failures between Roost and the Bot API that must never show twice, stall, or wedge: a
send whose answer was lost, a 429 on the typing indicator, a redelivered button press,
half an emoji in an update. PTB over HTTP against the fake Bot API, the real app behind it."""

from __future__ import annotations

from adapters.render.markdown import render_markdown
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, plain_http, rendered, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_approvals import buttons, cards
from tests.test_telegram_streaming import final_texts, prose

NOT_MODIFIED = "message is not modified"


def sends(tg: FakeTelegram, chat_id: int) -> list:
    return [c for c in tg.calls_of("sendMessage") if c.params.get("chat_id") == chat_id]


async def test_lost_send_response_never_duplicates(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """The first message reached the chat, the connection dropped before the answer: the
    reply goes on in that message (found by a probe), never in a second copy."""
    answer = prose(700)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=2.0 / 35)))
    tg.drop_response_next("sendMessage", chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "a streamed answer over a flaky link")
        assert await final_texts(h, OWNER, rendered(answer)) == rendered(answer)  # complete, once
        (lost,) = sends(tg, OWNER)  # never sent again
        assert lost.dropped
        probe = next(c for c in h.edits_in(OWNER) if c.at > lost.at)
        assert NOT_MODIFIED in (probe.description or "")  # "that message shows exactly this"
        assert len(tg.bot_messages(OWNER)) == 1


async def test_read_timeout_on_the_only_send_never_duplicates(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """An instant answer (one send carries it all) whose answer stalls past the client's
    read timeout: the chat shows it once."""
    fake_api.script(reply_text("The whole answer in one message."))
    tg.drop_response_next("sendMessage", chat_id=OWNER, how="stall")
    adapter = {"request": plain_http(read_timeout=1.0)}
    async with running(tmp_path, tg, fake_api, adapter_kwargs=adapter) as h:
        tg.send_private(OWNER, "quick one")
        await h.says(OWNER, "The whole answer in one message.")
        await h.tg.await_for(lambda: any(NOT_MODIFIED in (c.description or "") for c in h.edits_in(OWNER)))
        await h.app.conversations.aclose()  # the run is over: nothing more may come
        assert [m.text for m in tg.bot_messages(OWNER)] == ["The whole answer in one message."]
        assert len(sends(tg, OWNER)) == 1


async def test_send_lost_before_it_took_effect_is_sent_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """To the client the same failure, but the message never arrived: the probe finds
    nothing, so the reply is sent afresh — the user still gets all of it, once."""
    answer = prose(400)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=1.0 / 20)))
    tg.drop_response_next("sendMessage", chat_id=OWNER, apply=False)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "again over a flaky link")
        assert await final_texts(h, OWNER, rendered(answer)) == rendered(answer)
        lost, fresh = sends(tg, OWNER)
        assert lost.dropped and fresh.ok
        probes = [c for c in h.edits_in(OWNER) if lost.at < c.at < fresh.at]
        assert probes and all("not found" in (c.description or "") or "can't be edited" in (c.description or "")
                              for c in probes)


async def test_bad_gateway_on_a_send_is_probed_then_sent_once(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A proxy's 502 may come after Telegram applied the request: unknown, so probed first;
    here nothing arrived, so it is sent once."""
    fake_api.script(reply_text("Short and sweet."))
    tg.fail_next("sendMessage", status=502, chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "hello")
        await h.says(OWNER, "Short and sweet.")
        await h.app.conversations.aclose()
        assert [m.text for m in tg.bot_messages(OWNER)] == ["Short and sweet."]
        refused, sent = sends(tg, OWNER)
        assert refused.status == 502 and sent.ok


def test_not_sent_is_told_apart_from_unknown() -> None:
    """Only an error raised before the request was written proves it was not sent."""
    import httpx
    from telegram.error import NetworkError, TimedOut

    from adapters.errors import DeliveryUnknown
    from adapters.telegram.transport import translate

    def wrapped(exc: NetworkError, cause: Exception) -> NetworkError:
        exc.__cause__ = cause
        return exc

    refused = wrapped(NetworkError("httpx.ConnectError: refused"), httpx.ConnectError("refused"))
    pool = wrapped(TimedOut("Pool timeout"), httpx.PoolTimeout("pool"))
    reset = wrapped(NetworkError("httpx.RemoteProtocolError"), httpx.RemoteProtocolError("disconnected"))
    read = wrapped(TimedOut(), httpx.ReadTimeout("read"))
    assert not isinstance(translate(refused), DeliveryUnknown)
    assert not isinstance(translate(pool), DeliveryUnknown)
    assert isinstance(translate(reset), DeliveryUnknown)
    assert isinstance(translate(read), DeliveryUnknown)


async def test_typing_429_does_not_stall_delivery(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """A 429 on the typing indicator only delays the next indicator, never the answer."""
    fake_api.script(Reply(Text("An answer that must not wait thirty seconds.", chunk_size=5, delay_s=0.05)))
    tg.fail_next("sendChatAction", status=429, retry_after=30, chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "are you there?")
        # Waiting 10 s (the default) for a 30 s pause would time out: the answer came first.
        await h.says(OWNER, render_markdown("An answer that must not wait thirty seconds.").text)
        (limited,) = [c for c in tg.calls_of("sendChatAction") if c.status == 429]
        assert limited.injected


async def test_redelivered_button_press_is_ignored(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """The same callback update delivered twice (a lost getUpdates confirmation): one
    decision, one card edit, the tool runs once."""
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run it")
        (card,) = await cards(h)
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["✅ Approve once"], first_name="Olivia")
        await h.bot_text(OWNER, lambda t: t == "ok")
        tg.redeliver(tg.update_id_of_query(query))
        tg.send_private(OWNER, "after")  # same chat, handled in order: after the redelivery
        await h.says(OWNER, "echo: after")
        await h.app.conversations.aclose()
        assert (h.workspace / "marker.txt").read_text() == "ran\n"
        decided = tg.message(OWNER, card.message_id)
        assert len(decided.edits) == 1 and (decided.text or "").endswith("by Olivia.")
        answers = [c for c in tg.calls_of("answerCallbackQuery") if c.params.get("callback_query_id") == query]
        assert len([c for c in answers if c.ok]) == 1


async def test_lone_surrogate_in_an_update_is_made_safe_at_the_edge(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Half an emoji in the user's text is replaced at the adapter, so it is stored and sent
    safely and the session keeps working."""
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.push_update({"message": {
            "message_id": 9001, "date": 1_700_000_000, "text": "half \ud83d an emoji",
            "chat": {"id": OWNER, "type": "private", "first_name": "Olivia"},
            "from": {"id": OWNER, "is_bot": False, "first_name": "Olivia"},
        }})
        await h.says(OWNER, "echo: half \ufffd an emoji")
        tg.send_private(OWNER, "still here?")
        await h.says(OWNER, "echo: still here?")


async def test_lost_card_send_never_shows_two_cards(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """An approval card whose send lost its answer is found (buttons and all), not sent
    again: one card, and pressing it works."""
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok"))
    tg.drop_response_next("sendMessage", chat_id=OWNER)
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "run it")
        (card,) = await cards(h)
        await tg.await_for(lambda: any(NOT_MODIFIED in (c.description or "") for c in h.edits_in(OWNER)))
        tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["✅ Approve once"], first_name="Olivia")
        await h.bot_text(OWNER, lambda t: t == "ok")
        # The decided card is an edit: it keeps 1 s from the probe, and the answer (a send)
        # may overtake it, so wait for it rather than expect it by the time "ok" shows.
        await tg.await_for(lambda: (tg.message(OWNER, card.message_id).text or "").endswith("by Olivia."))
        await h.app.conversations.aclose()  # the run is over: nothing more may come
        shown = [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("🔐")]
        assert len(shown) == 1 and (shown[0].text or "").endswith("by Olivia.")
        assert (h.workspace / "marker.txt").read_text() == "ran\n"
