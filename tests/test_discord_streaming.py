"""Streaming into Discord by editing in place, measured on the fake Discord's clock:
edits ≥ 1.2 s apart, split at 2000 characters with code fences balanced, and no send or
edit that could ping anyone."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text
from tests.fakes.discord_api import FakeDiscord
from tests.discord_harness import OWNER, Harness, dc, rendered, running  # noqa: F401  (dc is a fixture)

MIN_GAP_S = 1.2
CLOCK_SLACK_S = 0.25
"""Both times come from the fake's clock at request arrival; the adapter spaces request
starts, so arrival gaps can only shrink by the jitter of two local HTTP round trips (as
Telegram's JITTER_S: a loaded machine can delay one request's arrival)."""


def prose(chars: int) -> str:
    words = "the agent streams answers by editing one message in place and never sends twice".split()
    out, n = [], 0
    while sum(len(p) + 2 for p in out) < chars:
        out.append(f"Line {n}: " + " ".join(words[(n + k) % len(words)] for k in range(10)) + ".")
        n += 1
    return "\n\n".join(out)[: chars - 1].rstrip() + "."


async def final_texts(h: Harness, channel: str, expected: list[str], timeout: float = 20.0) -> list[str]:
    def texts() -> list[str]:
        return [m.content for m in h.dc.bot_messages(channel)]

    try:
        await h.dc.await_for(lambda: texts() == expected, timeout)
    except TimeoutError:
        assert texts() == expected
    return texts()


async def test_1800_chars_over_3s_grow_one_message_by_edits_at_least_1_2s_apart(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    answer = prose(1800)
    fake_api.script(Reply(Text(answer, chunk_size=20, delay_s=3.0 / 90)))  # 90 chunks over 3 s
    async with running(tmp_path, dc, fake_api) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "tell me a story")
        await final_texts(h, dm, [answer])
        changes = h.changes_in(dm)
        sends = [c for c in changes if c.method == "POST"]
        edits = [c for c in changes if c.method == "PATCH"]
        assert len(sends) == 1 and len(edits) >= 2  # one message, grown by edits
        times = [c.at for c in changes]
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= MIN_GAP_S - CLOCK_SLACK_S, gaps
        assert all(c.json.get("allowed_mentions") == {"parse": []} for c in changes)


async def test_4500_chars_with_a_code_block_split_at_2000_with_fences_balanced(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    code = "\n".join(f"    value_{n} = compute({n})  # step {n}" for n in range(70))
    answer = prose(1200) + "\n\n```python\n" + code + "\n```\n\n" + prose(900)
    assert len(answer) > 4000
    fake_api.script(Reply(Text(answer, chunk_size=200, delay_s=0.01)))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "show me the code")
        texts = await final_texts(h, dm, rendered(answer))
        assert len(texts) >= 3
        assert all(len(t) <= 2000 for t in texts)
        assert all(t.count("```") % 2 == 0 for t in texts)  # every message closes what it opens
        assert not [c for c in dc.calls if c.status == 400]  # Discord never refused a request


async def test_mentions_in_the_answer_ping_nobody_in_any_send_or_edit(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    answer = "Hey @everyone and @here, <@111111111111111111> and <@&42> — " + prose(2500)
    fake_api.script(Reply(Text(answer, chunk_size=100, delay_s=0.01)))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "ping everyone")
        await final_texts(h, dm, rendered(answer))
        changes = h.changes_in(dm)
        assert len(changes) >= 2
        assert all(c.json.get("allowed_mentions") == {"parse": []} for c in changes)
