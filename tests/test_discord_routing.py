"""Who gets which session on Discord, over the wire: owner DM → main (shared with the
owner's Telegram DM), stranger → pairing, mention → the channel's sub-session, a thread
its own, unmentioned → kept as context only, a channel not allowed → ignored, every channel
of an allowed guild answered."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.recording_adapter import RecordingAdapter, private
from tests.discord_harness import (  # noqa: F401  (dc is a fixture)
    CHANNEL,
    GUILD,
    OTHER_CHANNEL,
    OWNER,
    PAIRING_CODE,
    STRANGER,
    TG_OWNER,
    THREAD,
    dc,
    running,
)


def system_and_messages(fake_api: FakeAnthropic, n: int) -> str:
    return str(fake_api.requests[n].json.get("system", "")) + str(fake_api.requests[n].json["messages"])


async def test_owner_dm_is_main_and_a_fact_told_there_is_known_on_telegram(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Noted: your cat is Miso."), reply_text("Your cat is Miso."))
    telegram = RecordingAdapter("telegram")
    async with running(tmp_path, dc, fake_api, paced=False, extra_adapters=[telegram]) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "remember: my cat is called Miso")
        await h.bot_text(dm, lambda t: t == "Noted: your cat is Miso.")
        assert dc.bot_messages(dm)[0].allowed_mentions == {"parse": []}
        await telegram.say(private(TG_OWNER, "what is my cat called?"))
        await fake_api.await_requests(2)
        # The Telegram DM's request carries the Discord DM's history: one main session.
        assert "my cat is called Miso" in system_and_messages(fake_api, 1)


async def test_a_stranger_gets_a_pairing_code_and_the_owners_button_pairs_them(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(STRANGER)
        dc.say(dm, STRANGER, "hello bot")
        told = await h.bot_text(dm, lambda t: PAIRING_CODE.search(t) is not None)
        code = PAIRING_CODE.search(told.content).group(0)  # type: ignore[union-attr]
        owner_note = await h.bot_text(dc.dm_channel(OWNER), lambda t: code in t)
        assert not fake_api.requests
        (label,) = owner_note.custom_ids  # the owner approves with the button
        dc.press(owner_note.id, OWNER, label=label)
        paired = await dc.await_for(lambda: (m := dc.message(owner_note.id)).components == [] and m)
        assert "Paired" in paired.content
        fake_api.script(reply_text("Welcome, Sam."))
        dc.say(dm, STRANGER, "hello again")
        await h.bot_text(dm, lambda t: t == "Welcome, Sam.")


async def test_mention_in_an_allowed_channel_answers_in_the_channel_sub_session(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Hello channel."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(CHANNEL, OWNER, "we ship on friday")  # not mentioned: context only
        asked = dc.say(CHANNEL, OWNER, "<@900000000000000001> when do we ship?", mention_bot=True)
        answer = await h.bot_text(CHANNEL, lambda t: t == "Hello channel.")
        assert answer.reference == asked  # replies to the question
        body = system_and_messages(fake_api, 0)
        assert "we ship on friday" in body and "@roost when do we ship?" in body


async def test_unmentioned_messages_get_no_reply(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_text("Only this."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(CHANNEL, OWNER, "just chatting")
        dc.say(CHANNEL, STRANGER, "me too")
        dc.say(CHANNEL, OWNER, "<@900000000000000001> hi", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: t == "Only this.")
        assert len(fake_api.requests) == 1
        assert [m.content for m in dc.bot_messages(CHANNEL)] == ["Only this."]


async def test_a_thread_is_its_own_sub_session(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_text("In the channel."), reply_text("In the thread."))
    dc.add_thread(THREAD, CHANNEL)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(CHANNEL, OWNER, "<@900000000000000001> the secret word is PARSNIP", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: t == "In the channel.")
        dc.say(THREAD, OWNER, "<@900000000000000001> what was the word?", mention_bot=True)
        await h.bot_text(THREAD, lambda t: t == "In the thread.")
        assert "PARSNIP" not in system_and_messages(fake_api, 1)  # no leak between sessions
        assert dc.bot_messages(CHANNEL)[-1].content == "In the channel."


async def test_a_channel_that_is_not_allowed_is_ignored(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_text("Allowed here."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(OTHER_CHANNEL, OWNER, "<@900000000000000001> hello?", mention_bot=True)
        dc.say(CHANNEL, OWNER, "<@900000000000000001> hello!", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: t == "Allowed here.")
        assert not dc.bot_messages(OTHER_CHANNEL)
        assert len(fake_api.requests) == 1


async def test_a_redelivered_message_is_answered_once(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    fake_api.script(reply_text("Once."), reply_text("Twice?!"))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        first = dc.say(dm, OWNER, "hello")
        await h.bot_text(dm, lambda t: t == "Once.")
        dc.redeliver(first)
        dc.say(dm, OWNER, "and again")  # a later message is answered; the redelivery is not
        await h.bot_text(dm, lambda t: t == "Twice?!")
        answers = [m.content for m in dc.bot_messages(dm) if not m.content.startswith("⏳")]  # "queued" notice
        assert answers == ["Once.", "Twice?!"]
        assert len(fake_api.requests) == 2


FOREIGN_GUILD = "600000000000000000"
FOREIGN_CHANNEL = "600000000000000001"


async def test_every_channel_of_an_allowed_guild_answers_a_mention_and_another_guild_is_ignored(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    """ROOST_DISCORD__ALLOWED_GUILDS allows a guild's channels although no channel is listed."""
    dc.add_guild(FOREIGN_GUILD, [FOREIGN_CHANNEL])
    fake_api.script(reply_text("Guild-wide hello."))
    guild_wide = {"allowed_channels": [], "allowed_guilds": [GUILD]}
    async with running(tmp_path, dc, fake_api, paced=False, discord=guild_wide) as h:
        dc.say(FOREIGN_CHANNEL, OWNER, "<@900000000000000001> anyone?", mention_bot=True)
        dc.say(OTHER_CHANNEL, OWNER, "<@900000000000000001> hello?", mention_bot=True)
        await h.bot_text(OTHER_CHANNEL, lambda t: t == "Guild-wide hello.")
        assert not dc.bot_messages(FOREIGN_CHANNEL)
        assert len(fake_api.requests) == 1


async def test_a_wildcard_allowed_guilds_answers_in_any_guild(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    dc.add_guild(FOREIGN_GUILD, [FOREIGN_CHANNEL])
    fake_api.script(reply_text("Anywhere."))
    any_guild = {"allowed_channels": [], "allowed_guilds": ["*"]}
    async with running(tmp_path, dc, fake_api, paced=False, discord=any_guild) as h:
        dc.say(FOREIGN_CHANNEL, OWNER, "<@900000000000000001> here too?", mention_bot=True)
        await h.bot_text(FOREIGN_CHANNEL, lambda t: t == "Anywhere.")


async def test_the_last_20_unmentioned_channel_messages_are_the_context_of_the_next_mention(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_text("Caught up."))
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        for n in range(25):
            dc.say(CHANNEL, STRANGER, f"chatter number {n:02d}")
        dc.say(CHANNEL, OWNER, "<@900000000000000001> summarise", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: t == "Caught up.")
        body = system_and_messages(fake_api, 0)
        assert all(f"chatter number {n:02d}" in body for n in range(5, 25))
        assert not any(f"chatter number {n:02d}" in body for n in range(5))
