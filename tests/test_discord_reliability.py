"""Discord faults over the wire: a dropped gateway is resumed without losing or repeating
an answer; a 429 in the middle of a streamed answer never duplicates a message; neither
does a lost answer to a send, a card's included."""

from __future__ import annotations

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, ToolUse, reply_text, reply_tools
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

        def answers() -> list[str]:  # a "⏳ queued" notice may come first if run one is still closing
            return [m.content for m in dc.bot_messages(dm) if not m.content.startswith("⏳")]

        await dc.await_for(lambda: len(answers()) >= 2, 20)
        assert answers() == ["First answer.", "Second answer."]
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


async def test_lost_send_answer_never_duplicates(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    """The first message is posted but its answer is lost: the same nonce finds it again
    (Discord answers a repeated nonce with the first message), so it is edited on, never
    posted twice."""
    answer = prose(1500)
    fake_api.script(Reply(Text(answer, chunk_size=100, delay_s=0.02)))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        dc.say(dm, OWNER, "tell me")
        await final_texts(h, dm, rendered(answer))
        posts = [c for c in dc.calls if c.method == "POST" and c.path == f"/channels/{dm}/messages"]
        assert len(posts) >= 2 and len({c.json["nonce"] for c in posts}) == 1  # the retry reused the nonce
        assert len(dc.bot_messages(dm)) == 1


async def test_a_reply_cut_off_by_a_crash_is_marked_in_place_at_the_next_start(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    from bot.storage import Storage

    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass  # creates the database
    visible = "The answer was halfway thr"
    message_id = dc.post_as_bot(dm, visible)  # what the dead process had shown
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'home' / 'roost.db'}")
    try:
        await storage.record_delivery("run-cut", 0, platform="discord", chat_id=dm, text=visible,
                                      state="streaming", message_id=message_id)
    finally:
        await storage.aclose()
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        marked = await dc.await_for(lambda: (m := dc.message(message_id)).edits and m)
        assert marked.content == visible + "\n\n… (interrupted: Roost restarted)"
        assert not [c for c in dc.calls if c.method == "POST" and c.path == f"/channels/{dm}/messages"]
        assert not await h.app.storage.unfinished_deliveries()


@pytest.mark.parametrize("action_chars", [40, 2000], ids=["inline", "action.txt"])
async def test_lost_card_send_never_shows_two_cards(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic, action_chars: int
) -> None:
    """The card is posted but its answer is lost: it is looked up by its nonce (with its
    file, when the action goes as action.txt), never posted twice, and its buttons work."""
    payload = "x" * (action_chars - len("echo  > marker.txt"))
    command = f"echo {payload} > marker.txt"
    fake_api.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("Ran it."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.lose_next_answer("POST", f"/channels/{dm}/messages")
        dc.say(dm, OWNER, "run it")
        card = await h.bot_text(dm, lambda t: t.startswith("🔐"))
        dc.press(card.id, OWNER, label="✅ Approve once")
        await h.bot_text(dm, lambda t: t == "Ran it.")
        assert [m.id for m in dc.bot_messages(dm) if m.content.startswith("🔐")] == [card.id]
        posts = [c for c in dc.calls if c.method == "POST" and c.path == f"/channels/{dm}/messages"]
        assert len(posts) >= 3  # the lost card, its lookup, the answer
        assert len(dc.message(card.id).attachments) == (1 if action_chars > 1500 else 0)
        assert (h.workspace / "marker.txt").read_text() == payload + "\n"
