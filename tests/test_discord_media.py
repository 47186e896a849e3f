"""Discord attachments take the same path as Telegram's: several images in one message are
one turn with the images, a text file arrives as text, a voice message is transcribed; the
files are fetched from their attachment URL (the fake serves them, 404 for anything else)
and saved in the channel's own folder — discord.py against the fake Discord."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.discord_harness import CHANNEL, OWNER, dc, running  # noqa: F401  (fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import user_blocks, user_texts
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.stt_api import FakeStt
from tests.media_support import image_size, jpeg, spoken_ogg


@pytest.fixture
def stt() -> Iterator[FakeStt]:
    with FakeStt(api_key=None, transcript="hello from discord") as fake:
        yield fake


async def test_three_images_in_one_message_are_one_turn_with_three_images(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        files = [(f"p{n}.jpg", "image/jpeg", jpeg(2000, 1000)) for n in range(3)]
        dc.say(dm, OWNER, "which is best?", files=files)
        await h.bot_text(dm, lambda t: t.startswith("echo:"))
        assert len(fake_api.requests) == 1
        images = [b for b in user_blocks(fake_api.requests[0].json) if b["type"] == "image"]
        assert [image_size(b) for b in images] == [(1568, 784)] * 3
        assert len(list((h.workspace / "inbox").iterdir())) == 3


async def test_a_file_in_a_guild_channel_is_saved_in_that_channels_folder_only(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dc.say(CHANNEL, OWNER, "<@%s> read this" % dc.bot_id, mention_bot=True,
               files=[("notes.md", "text/markdown", b"# Notes\nbuy milk\n")])
        await h.bot_text(CHANNEL, lambda t: t.startswith("echo:"))
        texts = " ".join(user_texts(fake_api.requests[0].json))
        assert "buy milk" in texts
        (saved,) = [p.relative_to(h.workspace) for p in h.workspace.rglob("notes.md")]
        assert saved.parts[0] == "groups" and saved.parts[-2] == "inbox"
        assert not (h.workspace / "inbox").exists()  # nothing in main's folder


async def test_a_discord_voice_message_is_transcribed_and_answered(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic, stt: FakeStt
) -> None:
    async with running(tmp_path, dc, fake_api, paced=False, stt={"base_url": stt.base_url}) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "", files=[("voice-message.ogg", "audio/ogg", spoken_ogg("hello from discord"))], voice=True)
        await h.bot_text(dm, lambda t: t == '🎤 "hello from discord"')
        await h.bot_text(dm, lambda t: t.startswith("echo:"))
        assert stt.requests[0].seconds > 0.5


async def test_send_file_posts_a_discord_attachment(tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic) -> None:
    from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools

    async with running(tmp_path, dc, fake_api, paced=False) as h:
        h.workspace.mkdir(parents=True, exist_ok=True)
        (h.workspace / "todo.md").write_text("- water plants\n")
        fake_api.script(reply_tools(ToolUse("send_file", {"path": "todo.md", "caption": "here"})), reply_text("sent"))
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "send me my todo list")
        await h.bot_text(dm, lambda t: t == "sent")
        (sent,) = [m for m in dc.bot_messages(dm) if m.attachments]
        assert sent.content == "here"
        assert [(a["filename"], a["data"]) for a in sent.attachments] == [("todo.md", "- water plants\n")]  # the fake keeps text


async def test_voice_on_in_discord_answers_a_voice_message_with_an_ogg_opus_attachment(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic, stt: FakeStt
) -> None:
    from tests.media_support import audio_seconds

    settings = {"stt": {"base_url": stt.base_url}, "tts": {"base_url": stt.base_url}}
    async with running(tmp_path, dc, fake_api, paced=False, **settings) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "/voice on")
        await h.bot_text(dm, lambda t: t.startswith("Voice replies on"))
        dc.say(dm, OWNER, "", files=[("voice-message.ogg", "audio/ogg", spoken_ogg("hello from discord"))], voice=True)
        await h.bot_text(dm, lambda t: t.startswith("echo:"))
        sent = await dc.await_for(lambda: next((m for m in dc.bot_messages(dm) if m.attachments), None))
        (attachment,) = sent.attachments
        assert attachment["filename"] == "answer.ogg"
        audio = dc.state.uploads[attachment["id"]]
        assert audio.startswith(b"OggS") and audio_seconds(audio) > 0.5


async def test_a_30_mb_discord_attachment_gets_a_clear_message_and_is_never_fetched(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, "", files=[("video.mp4", "video/mp4", b"\0" * (30 * 1024 * 1024))])
        await h.bot_text(dm, lambda t: "is 30 MB; I take up to 20 MB" in t)
        dc.say(dm, OWNER, "still there?")
        await h.bot_text(dm, lambda t: t == "echo: still there?")
        assert dc.cdn_gets == [] and len(fake_api.requests) == 1
        assert not (h.workspace / "inbox").exists()
