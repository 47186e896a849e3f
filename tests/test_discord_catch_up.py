"""Nothing sent to the bot on Discord is lost to a gap: a new gateway session (a new
process, or a RESUME Discord refused) replays nothing, so the adapter fetches each watched
channel's history after its cursor and hands it to the same inbox as live messages.

Invariant: every user message in a watched channel written while Roost was away, within
the bound (the newest 100 per channel, 24 h), is answered exactly once and in its channel's
order; what lies beyond the bound is told to the owner in one line and not answered; a
message already handled is never answered again, however stale the cursor."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from adapters.catch_up import CatchUp
from adapters.discord.gap import fetch_gap
from tests.discord_harness import CHANNEL, MEMBER, OWNER, THREAD, Harness, dc, running  # noqa: F401  (dc is a fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, Text, last_user_text
from tests.fakes.discord_api import FakeDiscord
from tests.test_fake_discord import USER as FAKE_USER
from tests.test_fake_discord import fake_and_client  # noqa: F401  (fixture)

MISSED = "While I was offline, messages older than 24 h"


def echo(fake_api: FakeAnthropic) -> None:
    fake_api.responder = lambda body: Reply(Text(f"answer to {last_user_text(body)}"))


def answers(dc: FakeDiscord, channel: str) -> list[str]:
    return [m.content for m in dc.bot_messages(channel) if m.content.startswith("answer to")]


def asked(fake_api: FakeAnthropic) -> list[str]:
    return [last_user_text(r.json) for r in fake_api.requests]


def history_reads(dc: FakeDiscord, channel: str) -> int:
    return len([c for c in dc.calls if c.method == "GET" and c.path == f"/channels/{channel}/messages"])


async def settled(h: Harness) -> None:
    await h.app.conversations.lanes.drain()


async def test_messages_sent_while_roost_was_stopped_are_answered_once_in_order(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(dm, OWNER, "hello")
        await h.bot_text(dm, lambda t: t == "answer to hello")
        await settled(h)
    # Roost is stopped: nobody is connected to the gateway.
    dc.say(dm, OWNER, "first while down")
    dc.say(dm, OWNER, "second while down")
    dc.say(CHANNEL, MEMBER, "<@900000000000000001> third while down", mention_bot=True)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await dc.await_for(lambda: len(answers(dc, dm)) >= 3 and answers(dc, CHANNEL), 20)
        await settled(h)
        assert answers(dc, dm) == ["answer to hello", "answer to first while down", "answer to second while down"]
        (mention,) = answers(dc, CHANNEL)  # the group message comes framed with its sender
        assert "@roost third while down" in mention
        assert asked(fake_api) in (
            ["hello", "first while down", "second while down", mention.removeprefix("answer to ")],
            ["hello", "first while down", mention.removeprefix("answer to "), "second while down"],
            ["hello", mention.removeprefix("answer to "), "first while down", "second while down"],
        )
    requests, fetched = len(fake_api.requests), history_reads(dc, dm)
    async with running(tmp_path, dc, fake_api, paced=False) as h:  # the next start answers nothing again
        await dc.await_for(lambda: history_reads(dc, dm) > fetched or None, 20)
        await h.adapter.caught_up()
        await settled(h)
    assert len(fake_api.requests) == requests and len(answers(dc, dm)) == 3


async def test_a_mention_in_an_allowed_channels_thread_while_stopped_is_answered_in_the_thread(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dc.add_thread(THREAD, CHANNEL)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass  # the thread is known: its cursor starts here
    dc.say(THREAD, MEMBER, "<@900000000000000001> thread question", mention_bot=True)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await dc.await_for(lambda: answers(dc, THREAD) or None, 20)
        await h.adapter.caught_up()
        await settled(h)
    (answer,) = answers(dc, THREAD)
    assert "@roost thread question" in answer and not answers(dc, CHANNEL)


async def test_a_mention_in_a_thread_created_while_stopped_is_answered_in_the_thread(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The thread did not exist when Roost stopped, so it has no cursor of its own: its
    channel's cursor bounds it (every message in it is newer than the thread), instead of
    the thread counting as first seen now and its mention being lost without a word."""
    echo(fake_api)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass  # the channel is known: its cursor starts here
    dc.add_thread(THREAD, CHANNEL)
    dc.say(THREAD, MEMBER, "<@900000000000000001> new thread question", mention_bot=True)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await dc.await_for(lambda: answers(dc, THREAD) or None, 20)
        await h.adapter.caught_up()
        await settled(h)
    (answer,) = answers(dc, THREAD)
    assert "@roost new thread question" in answer and not answers(dc, CHANNEL)


async def test_a_message_in_the_gap_of_a_refused_resume_is_answered_once(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(dm, OWNER, "one")
        await h.bot_text(dm, lambda t: t == "answer to one")
        dc.refuse_next_resume()
        dc.hold_connections()
        dc.drop_gateway()
        dc.say(dm, OWNER, "two")  # in the gap: Discord will replay nothing of it
        dc.release_connections()
        await h.bot_text(dm, lambda t: t == "answer to two", 20)
        await settled(h)
        assert len(dc.resumes) == 1 and len(dc.identifies) == 2  # refused, then a new session
        assert answers(dc, dm) == ["answer to one", "answer to two"]
        assert asked(fake_api) == ["one", "two"]


async def test_a_message_older_than_the_bound_is_told_to_the_owner_not_answered(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    two_days_ago = datetime.now(UTC) - timedelta(days=2)
    async with running(tmp_path, dc, fake_api, paced=False, adapter_kwargs={"now": lambda: two_days_ago}):
        pass  # the cursors start two days ago
    dc.say(dm, OWNER, "stale question", at=datetime.now(UTC) - timedelta(hours=25))
    dc.say(dm, OWNER, "fresh question")
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await h.bot_text(dm, lambda t: t == "answer to fresh question", 20)
        told = await h.bot_text(dm, lambda t: t.startswith(MISSED))
        await settled(h)
        assert "1 in the DM with olivia" in told.content
        assert asked(fake_api) == ["fresh question"]
        assert sorted(m.content for m in dc.bot_messages(dm)) == sorted(["answer to fresh question", told.content])


async def test_a_message_seen_live_is_never_answered_twice_after_a_reconnect_or_a_stale_cursor(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        before = dc.say(dm, OWNER, "warm up")
        await h.bot_text(dm, lambda t: t == "answer to warm up")
        dc.say(dm, OWNER, "seen live")
        await h.bot_text(dm, lambda t: t == "answer to seen live")
        dc.refuse_next_resume()
        dc.drop_gateway()
        await dc.await_for(lambda: len(dc.identifies) == 2 and dc.connected or None, 20)
        await dc.await_for(lambda: history_reads(dc, dm) > 0 or None, 20)
        await h.adapter.caught_up()
        await settled(h)
    # A crash may leave a cursor behind what was handled: the next start fetches it again.
    with sqlite3.connect(tmp_path / "home" / "roost.db") as db:
        assert db.execute("UPDATE channel_cursors SET message_id = ? WHERE channel_id = ?", (before, dm)).rowcount == 1
    fetched = history_reads(dc, dm)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await dc.await_for(lambda: history_reads(dc, dm) > fetched or None, 20)
        await h.adapter.caught_up()
        await settled(h)
    assert answers(dc, dm) == ["answer to warm up", "answer to seen live"]
    assert asked(fake_api) == ["warm up", "seen live"]


async def test_a_live_message_during_the_catch_up_waits_for_the_older_ones(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False):
        pass
    dc.say(dm, OWNER, "written while down")
    dc.hold_history()
    try:
        async with running(tmp_path, dc, fake_api, paced=False) as h:
            await dc.await_for(lambda: dc.history_waiting > 0 or None)
            dc.say(dm, OWNER, "written live")  # arrives while the gap is still being read
            dc.release_history()
            await dc.await_for(lambda: len(answers(dc, dm)) >= 2 or None, 20)
            await settled(h)
    finally:
        dc.release_history()
    assert answers(dc, dm) == ["answer to written while down", "answer to written live"]
    assert asked(fake_api) == ["written while down", "written live"]


async def test_fetch_gap_answers_the_newest_within_the_bounds_and_counts_the_rest(fake_and_client) -> None:
    """adapters.discord.gap against the fake's history: the newest `max_messages` after the
    cursor in order, the rest counted (exactly when the two reads overlap), older than
    `max_age` counted, never returned."""
    fake, client = fake_and_client
    now = datetime.now(UTC)
    cursor = int(fake.say("501", FAKE_USER, "seen", at=now - timedelta(hours=30)))
    fake.say("501", FAKE_USER, "too old", at=now - timedelta(hours=25))
    for n in range(5):
        fake.say("501", FAKE_USER, f"m{n}")
    channel = await client.fetch_channel(501)
    gap = await fetch_gap(channel, cursor, now + timedelta(seconds=1), CatchUp(max_messages=3))
    assert [m.content for m in gap.messages] == ["m2", "m3", "m4"]
    assert (gap.older, gap.more) == (1 + 2, False)  # too old, m0, m1
    for n in range(5, 9):
        fake.say("501", FAKE_USER, f"m{n}")
    gap = await fetch_gap(channel, cursor, now + timedelta(seconds=1), CatchUp(max_messages=3))
    assert [m.content for m in gap.messages] == ["m6", "m7", "m8"]
    assert gap.more and gap.older >= 1 + 3  # m3..m5 were never read: "at least"
    everything = await fetch_gap(channel, cursor, now + timedelta(seconds=1), CatchUp(max_messages=100))
    assert [m.content for m in everything.messages] == [f"m{n}" for n in range(9)] and everything.older == 1


async def test_a_message_the_inbox_failed_to_store_is_fetched_again_though_a_later_one_was_stored(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """The database refuses the first message of a gap (locked for a moment); the second is
    stored and answered. The channel's cursor must not pass the first: the next session
    fetches it again and it is answered, once."""
    echo(fake_api)
    dm = dc.dm_channel(OWNER)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(dm, OWNER, "hello")
        await h.bot_text(dm, lambda t: t == "answer to hello")
        await settled(h)
    dc.say(dm, OWNER, "first while down")
    dc.say(dm, OWNER, "second while down")

    def lock_once(app) -> None:  # noqa: ANN001
        receive, failed = app.storage.receive_inbound, []

        async def flaky(message):  # noqa: ANN001, ANN202
            if not failed and "first while down" in message.text:
                failed.append(message)
                raise sqlite3.OperationalError("database is locked")
            return await receive(message)

        app.storage.receive_inbound = flaky

    async with running(tmp_path, dc, fake_api, paced=False, prepare=lock_once) as h:
        await h.bot_text(dm, lambda t: t == "answer to second while down")
        await h.adapter.caught_up()
        await settled(h)
    assert "answer to first while down" not in answers(dc, dm)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        await h.bot_text(dm, lambda t: t == "answer to first while down", timeout=20)
        await h.adapter.caught_up()
        await settled(h)
    assert answers(dc, dm) == ["answer to hello", "answer to second while down", "answer to first while down"]
