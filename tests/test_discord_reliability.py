"""Discord faults over the wire: a dropped gateway is resumed without losing or repeating
an answer; a 429 in the middle of a streamed answer never duplicates a message."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, reply_text
from tests.fakes.discord_api import FakeDiscord
from tests.discord_harness import OWNER, dc, rendered, running  # noqa: F401  (fixture)
from tests.test_discord_streaming import final_texts, prose


async def test_a_dropped_gateway_resumes_and_no_answer_is_lost_or_repeated(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("First answer."), reply_text("Second answer."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "one")
        await h.bot_text(dm, lambda t: t == "First answer.")
        dc.drop_gateway()
        dc.say(dm, OWNER, "two")  # sent while the bot is disconnected
        await final_texts(h, dm, ["First answer.", "Second answer."])
        assert len(dc.identifies) == 1 and len(dc.resumes) == 1  # resumed, not a new session
        assert len(fake_api.requests) == 2


async def test_429_during_a_streamed_answer_never_duplicates_a_message(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    answer = prose(3000)
    fake_api.script(Reply(Text(answer, chunk_size=100, delay_s=0.02)))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.rate_limit_next("PATCH", f"/channels/{dm}/messages", 0.4)
        dc.rate_limit_next("POST", f"/channels/{dm}/messages", 0.4)
        dc.say(dm, OWNER, "a long one please")
        texts = await final_texts(h, dm, rendered(answer))
        assert len(texts) == 2
        statuses = [c.status for c in dc.calls if c.path.startswith(f"/channels/{dm}/messages")]
        assert statuses.count(429) == 2
        posted = [c for c in dc.calls if c.method == "POST" and c.path == f"/channels/{dm}/messages" and c.status == 200]
        assert len(posted) == 2  # one per part, whatever was refused
