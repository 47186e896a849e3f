"""Faults the Bot API really answers with, injected by the fake: flood control, "not
modified", entities it cannot parse, a text it finds too long."""

from __future__ import annotations

from adapters.render.markdown import render_markdown
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, rendered, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_streaming import final_texts, prose, stream_calls

NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)
SHORT = "Here is **the answer** you asked for, with `code` and a [link](https://example.com)."


async def test_429_during_stream_never_duplicates_and_keeps_the_tail(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    answer = prose(3000)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=3.0 / 150)))
    tg.fail_next("sendMessage", status=429, retry_after=1, chat_id=OWNER)
    tg.fail_next("editMessageText", status=429, retry_after=1, count=2, chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "a long answer under flood control")
        texts = await final_texts(h, OWNER, rendered(answer))
        assert texts == rendered(answer)  # complete, nothing repeated
        calls = stream_calls(tg, OWNER)
        refused = [c for c in calls if c.status == 429]
        assert len(refused) == 3
        sent = [c for c in calls if c.method == "sendMessage" and c.ok]
        assert len(sent) == 1  # the refused send was retried, never doubled
        assert sent[0].at - calls[0].at >= 1.0  # and only after retry_after
        assert sent[0].at - fake_api.requests[0].received_at < 3.0  # first text ≤ 3 s


async def test_not_modified_counts_as_delivered(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    answer = prose(2000)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=2.0 / 100)))
    tg.fail_next("editMessageText", status=400, description=NOT_MODIFIED, chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "go")
        await final_texts(h, OWNER, rendered(answer))
        edits = [c for c in stream_calls(tg, OWNER) if c.method == "editMessageText"]
        assert edits[0].description and "not modified" in edits[0].description
        # The next edit carried newer text, not a retry of the refused one.
        assert edits[1].ok and edits[1].params["text"] != edits[0].params["text"]
        assert len(tg.calls_of("sendMessage")) == 1


async def test_unparseable_entities_fall_back_to_plain_text(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text(SHORT, chunk_size=1000)))  # one delta: the first send is the whole answer
    tg.fail_next(
        "sendMessage", status=400, chat_id=OWNER,
        description="Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 14",
    )
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "go")
        expected = render_markdown(SHORT)
        await final_texts(h, OWNER, [expected.text])
        refused, accepted = tg.calls_of("sendMessage")
        assert refused.status == 400 and refused.params.get("entities")
        assert accepted.ok and not accepted.params.get("entities")
        assert accepted.params["text"] == expected.text
        assert len(tg.bot_messages(OWNER)) == 1


async def test_message_too_long_is_answered_with_a_shortened_message_not_nothing(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(Reply(Text(SHORT, chunk_size=1000)))  # one delta: the first send is the whole answer
    tg.fail_next("sendMessage", status=400, description="Bad Request: message is too long", chat_id=OWNER)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "go")
        message = await h.bot_text(OWNER, lambda t: t.endswith("…"))
        assert message.text == render_markdown(SHORT).text + "…"  # plain, cut to 90% of the limit
        refused, accepted = tg.calls_of("sendMessage")
        assert refused.description == "Bad Request: message is too long" and accepted.ok
        assert len(tg.bot_messages(OWNER)) == 1
