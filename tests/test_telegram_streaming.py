"""Streaming into Telegram by editing in place, measured on the fake Bot API's clock."""

from __future__ import annotations

import pytest

from adapters.render.utf16 import utf16_len
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import Call
from tests.telegram_harness import (  # noqa: F401  (tg is a fixture)
    GROUP,
    MEMBER,
    OWNER,
    Harness,
    rendered,
    running,
    tg,
)

CHANGING = ("sendMessage", "editMessageText", "sendDocument", "editMessageReplyMarkup")
JITTER_S = 0.25
"""Requests leave paced on Roost's clock, 1.05 s apart (3.05 s in groups); they *arrive* at
the fake with the loaded machine's scheduling jitter. Exact spacing is pinned on a fake
clock (test_stream_renderer, test_outbox); over the wire we allow this much."""


def prose(chars: int, seed: str = "Roost") -> str:
    """Markdown prose of about `chars` characters, with some formatting and paragraphs."""
    words = ["the", "agent", "**streams**", "answers", "by", "editing", "one", "message", "in",
             "place", "and", "never", "sends", "`twice`", "while", "it", "thinks"]
    out, n = [], 0
    while sum(len(p) + 2 for p in out) < chars:
        sentence = " ".join(words[(n + k) % len(words)] for k in range(12))
        out.append(f"{seed} {n}: {sentence.capitalize()}." + (" More." if n % 3 else ""))
        n += 1
    return "\n\n".join(out)[: chars - 1].rstrip() + "."


def stream_calls(tg: FakeTelegram, chat_id: int) -> list[Call]:
    return [c for c in tg.calls if c.method in CHANGING and c.params.get("chat_id") == chat_id]


async def final_texts(h: Harness, chat_id: int, expected: list[str], timeout: float = 20.0) -> list[str]:
    """Wait until the bot's messages in the chat show exactly `expected`; return them."""

    def texts() -> list[str]:
        return [m.text or "" for m in h.tg.bot_messages(chat_id)]

    try:
        await h.tg.await_for(lambda: texts() == expected, timeout)
    except TimeoutError:
        assert texts() == expected  # shows the difference
    return texts()


async def test_3000_char_answer_streams_one_message_paced_at_least_1s(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    answer = prose(3000)
    assert len(answer) == 3000
    chunk, delay = 20, 3.0 / 150  # 150 chunks over 3 s
    fake_api.script(Reply(Text(answer, chunk_size=chunk, delay_s=delay)))
    tg.flood_limit(1.0 - JITTER_S, burst=3)  # Telegram's flood control, as the fake models it
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "tell me a long story")
        await final_texts(h, OWNER, rendered(answer))
        calls = stream_calls(tg, OWNER)
        sends = [c for c in calls if c.method == "sendMessage"]
        edits = [c for c in calls if c.method == "editMessageText"]
        # 150 deltas coalesced into a few edits (one per ≥1 s slot: 3 on an idle machine,
        # more when load stretches the stream); the spacing is checked below.
        assert len(sends) == 1 and len(edits) <= 8, [c.method for c in calls]
        assert all(c.ok for c in tg.calls), [(c.method, c.description) for c in tg.calls if not c.ok]
        gaps = [b.at - a.at for a, b in zip(calls, calls[1:])]  # one message: edits of it
        assert min(gaps) >= 1.0 - JITTER_S, gaps
        # First visible text: the model had 30 characters two chunks after it started; the
        # 1 s fallback timer would have sent later (the bench measures the real figure).
        thirty_chars_at = fake_api.requests[0].received_at + 2 * delay
        first_visible = sends[0].at - thirty_chars_at
        assert first_visible < 0.9, first_visible
        typing = [c for c in tg.calls_of("sendChatAction") if c.params.get("chat_id") == OWNER]
        assert typing and typing[0].at < sends[0].at


async def test_group_stream_is_paced_at_20_requests_a_minute(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    answer = prose(1500)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=2.0 / 75)))  # 2 s of streaming
    tg.flood_limit(1.0 - JITTER_S, burst=3, group_per_minute=20)
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_group(GROUP, MEMBER, "a story for the group", mention=True, first_name="Bob")
        await final_texts(h, GROUP, rendered(answer))
        calls = stream_calls(tg, GROUP)
        gaps = [b.at - a.at for a, b in zip(calls, calls[1:])]
        assert calls[0].method == "sendMessage" and len(calls) >= 2
        assert min(gaps) >= 3.0 - JITTER_S, gaps  # Telegram: 20 messages a minute per group
        assert all(c.ok for c in calls)


async def test_10000_char_answer_splits_with_the_code_fence_closed_and_reopened(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    code = "\n".join(f'echo "step {i}: compute factor {i % 7}" >> build.log' for i in range(120))
    answer = f"{prose(1500, 'A')}\n\n```bash\n{code}\n```\n\n"
    answer += prose(10_000 - len(answer), "B")
    assert len(answer) == 10_000 and answer.index("```bash") < 4096 < answer.index("step 119")
    fake_api.script(Reply(Text(answer, chunk_size=200, delay_s=0.01)))
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "long one please")
        expected = rendered(answer)
        assert len(expected) == 3
        await final_texts(h, OWNER, expected)
        messages = tg.bot_messages(OWNER)
        assert all(utf16_len(m.text or "") <= 4096 for m in messages)
        assert len(tg.calls_of("sendMessage")) == len(messages)  # no duplicates
        first, second = messages[0], messages[1]
        closing = [e for e in first.entities if e["type"] == "pre"][-1]
        assert closing.get("language") == "bash"
        assert closing["offset"] + closing["length"] == utf16_len(first.text or "")  # closed at the end
        reopened = second.entities[0]
        assert reopened["type"] == "pre" and reopened["offset"] == 0 and reopened.get("language") == "bash"
        assert "step 0:" in (first.text or "") and "step 119:" in (second.text or "")
        assert "```" not in "".join(m.text or "" for m in messages)  # fences became entities


async def test_emoji_are_counted_in_utf16_units(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    answer = "Party time! " + "🎉 " * 1500 + "done."  # 3,017 characters, 4,517 UTF-16 units
    assert len(answer) < 4096 < utf16_len(answer)
    fake_api.script(Reply(Text(answer, chunk_size=300)))
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "celebrate")
        expected = rendered(answer)
        assert len(expected) == 2
        await final_texts(h, OWNER, expected)
        assert all(c.ok for c in tg.calls), [(c.method, c.description) for c in tg.calls if not c.ok]
        assert all(utf16_len(m.text or "") <= 4096 for m in tg.bot_messages(OWNER))


async def test_code_block_opening_a_message_keeps_its_indentation(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    answer = "```python\n    indented = True\nprint(indented)\n```"
    fake_api.script(Reply(Text(answer, chunk_size=1000)))
    async with running(tmp_path, tg, fake_api) as h:
        tg.send_private(OWNER, "code only")
        shown = await h.bot_text(OWNER, lambda t: "print(indented)" in t)
        assert shown.text == rendered(answer)[0]
