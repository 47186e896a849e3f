"""Photos and files sent in Telegram reach the model as what they are (pixels, PDF
documents, text), saved in the chat's own folder; oversized files are refused clearly with
nothing stored — PTB over HTTP against the fake Bot API (getFile + file downloads), the real
app and the anthropic SDK against the fake Messages API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.media_support import image_size, jpeg, pdf
from tests.telegram_harness import GROUP, OWNER, running, tg  # noqa: F401  (fixture)
from workspace.access import Access


def _blocks(fake_api: FakeAnthropic, index: int = 0) -> list[dict[str, Any]]:
    return user_blocks(fake_api.requests[index].json)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_a_photo_with_a_caption_reaches_the_model_as_a_resized_image_and_the_caption_as_text(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(OWNER, OWNER, "photo", jpeg(3000, 2000), caption="what colour is this?")
        await h.bot_text(OWNER, lambda t: t.startswith("echo:"))
        assert len(fake_api.requests) == 1
        blocks = _blocks(fake_api)
        images = [b for b in blocks if b["type"] == "image"]
        assert len(images) == 1
        assert image_size(images[0]) == (1568, 1045)  # long edge at the API's useful size
        texts = " ".join(b["text"] for b in blocks if b["type"] == "text")
        assert "what colour is this?" in texts
        assert _files(h.workspace / "inbox") != []  # kept for later turns
        assert "inbox/" in texts  # and the model is told where


async def test_an_album_of_three_photos_is_one_turn_with_three_images(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        for n in range(3):
            tg.send_media(OWNER, OWNER, "photo", jpeg(800, 600, (n * 80, 0, 0)),
                          caption="compare these" if n == 0 else "", media_group_id="album-1")
        await h.bot_text(OWNER, lambda t: t.startswith("echo:"))
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 1
        assert [b["type"] for b in _blocks(fake_api)].count("image") == 3
        assert not [m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("⏳")]
        assert len(_files(h.workspace / "inbox")) == 3


async def test_a_30_mb_file_gets_a_clear_message_and_nothing_is_stored(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(OWNER, OWNER, "document", b"\0" * (30 * 1024 * 1024), file_name="big.bin",
                      mime_type="application/octet-stream")
        await h.bot_text(OWNER, lambda t: "is 30 MB; I take up to 20 MB" in t)
        tg.send_private(OWNER, "still there?")
        await h.says(OWNER, "echo: still there?")
        assert len(fake_api.requests) == 1
        assert tg._world.downloads == []  # never fetched
        assert _files(h.workspace / "inbox") == []


async def test_a_file_whose_size_was_not_declared_is_refused_by_getfile_without_storing_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, media={"max_mb": 50}) as h:
        tg.send_media(OWNER, OWNER, "document", b"\0" * (21 * 1024 * 1024), file_name="big.bin",
                      mime_type="application/octet-stream", caption="look", declared_size=0)
        await h.bot_text(OWNER, lambda t: "too big" in t and "20 MB" in t)
        await h.bot_text(OWNER, lambda t: t.startswith("echo:"))
        assert _files(h.workspace / "inbox") == []


async def test_a_pdf_is_a_document_block_and_a_csv_capped_text_both_readable_next_turn(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    csv = "name,score\n" + "".join(f"row{i},{i}\n" for i in range(5000))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(OWNER, OWNER, "document", pdf(2), file_name="report.pdf", mime_type="application/pdf",
                      caption="summarise")
        await h.bot_text(OWNER, lambda t: t.startswith("echo:"))
        docs = [b for b in _blocks(fake_api) if b["type"] == "document"]
        assert len(docs) == 1 and docs[0]["source"]["media_type"] == "application/pdf"
        tg.send_media(OWNER, OWNER, "document", csv.encode(), file_name="../../scores.csv", mime_type="text/csv")
        await h.app.conversations.lanes.drain()
        await fake_api.await_requests(2)
        texts = [b["text"] for b in _blocks(fake_api, 1) if b["type"] == "text"]
        contents = next(t for t in texts if t.startswith("Contents of"))
        assert "row0,0" in contents and len(contents) < 21_000  # capped
        assert _files(h.workspace / "inbox") == ["report.pdf", "scores.csv"]  # sanitised name
        fake_api.script(reply_tools(ToolUse("read_file", {"path": "inbox/scores.csv"})), reply_text("read it"))
        tg.send_private(OWNER, "what was in scores.csv?")
        await h.says(OWNER, "read it")
        result = next(b for b in _blocks(fake_api, 3) if b["type"] == "tool_result")
        assert "row1,1" in str(result["content"])


async def test_a_groups_upload_stays_in_its_folder_and_is_invisible_from_another_group(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    other = GROUP - 1
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(GROUP, 77, "document", b"secret plan\n", file_name="plan.txt", mime_type="text/plain",
                      caption="keep this", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("echo:"))
        saved = [p.relative_to(h.workspace) for p in h.workspace.rglob("plan.txt")]
        assert len(saved) == 1
        (rel,) = saved
        assert rel.parts[0] == "groups" and rel.parts[2] == "inbox"
        group_key = next(k for k in await _session_keys(h) if k.startswith("group:"))
        assert Access(group_key, "sub").allows(rel, "read")
        other_key = group_key.replace(str(GROUP), str(other))
        assert not Access(other_key, "sub").allows(rel, "read")
        # Main's media is not a group's either.
        tg.send_media(OWNER, OWNER, "document", b"owner only\n", file_name="mine.txt", mime_type="text/plain")
        await h.bot_text(OWNER, lambda t: t.startswith("echo:"))
        assert (h.workspace / "inbox" / "mine.txt").exists()
        assert not Access(group_key, "sub").allows(Path("inbox/mine.txt"), "read")
        # And the group's model request never carried main's file.
        assert all("owner only" not in str(r.json) for r in fake_api.requests[:1])


async def _session_keys(h: Any) -> list[str]:
    from sqlalchemy import select

    from bot.storage.models import SessionModel

    async with h.app.storage.engine.connect() as conn:
        return list((await conn.scalars(select(SessionModel.key))).all())


async def test_a_photo_telegram_no_longer_has_gets_a_clear_line_and_the_chat_goes_on(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        chat = {"id": OWNER, "type": "private", "first_name": "Olivia"}
        user = {"id": OWNER, "is_bot": False, "first_name": "Olivia"}
        tg.push_update({"message": {"date": 1_700_000_000, "chat": chat, "from": user, "message_id": 902,
                                    "photo": [{"file_id": "gone", "file_unique_id": "u", "width": 1, "height": 1}]}})
        await h.bot_text(OWNER, lambda t: t.startswith("Telegram would not give me that file"))
        await h.app.conversations.lanes.drain()
        tg.send_private(OWNER, "still there?")
        await h.says(OWNER, "echo: still there?")
        assert len(fake_api.requests) == 1 and _files(h.workspace / "inbox") == []


async def test_in_steer_mode_a_photo_sent_mid_answer_waits_for_the_next_turn_with_its_image(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from tests.fakes.anthropic_script import Reply, Text

    slow = "Looking into it now, one moment please while I check the files."
    fake_api.script(Reply(Text(slow, chunk_size=2, delay_s=0.05), ToolUse("list_dir", {})), reply_text("done listing"))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "/queue steer")
        await h.bot_text(OWNER, lambda t: t.startswith("Queue mode: steer"))
        tg.send_private(OWNER, "list my files")
        await h.bot_text(OWNER, lambda t: t.startswith("Looking"))
        tg.send_media(OWNER, OWNER, "photo", jpeg(400, 300), caption="and this")
        await h.bot_text(OWNER, lambda t: "done listing" in t)
        await fake_api.await_requests(3, timeout=15)
        await h.app.conversations.lanes.drain()
        assert [r.status for r in fake_api.requests] == [200, 200, 200]
        assert not [b for b in _blocks(fake_api, 1) if b["type"] == "image"]  # not steered in
        assert [b["type"] for b in _blocks(fake_api, 2)].count("image") == 1  # its own turn


async def test_a_voice_notes_transcript_is_in_the_chats_daily_log(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from tests.fakes.stt_api import FakeStt
    from tests.media_support import spoken_ogg

    with FakeStt(api_key=None, transcript="buy oat milk on friday") as stt:
        async with running(tmp_path, tg, fake_api, paced=False, stt={"base_url": stt.base_url}) as h:
            fake_api.script(reply_text("noted"))  # the answer does not repeat it: the log must
            tg.send_media(OWNER, OWNER, "voice", spoken_ogg("buy oat milk on friday"), mime_type="audio/ogg")
            await h.says(OWNER, "noted")
            await h.app.conversations.lanes.drain()
            logs = [p.read_text() for p in (h.workspace / "memory").rglob("*.md")]
            assert any("buy oat milk on friday" in text for text in logs)


async def test_an_unmentioned_group_photo_is_context_only_never_fetched_or_stored(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    tg.set_privacy_mode(False)  # the bot sees every group message
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(GROUP, 77, "photo", jpeg(400, 300), caption="our new office", first_name="Bob")
        tg.send_group(GROUP, 77, "what do you think?", mention=True)
        await h.bot_text(GROUP, lambda t: t.startswith("echo:"))
        blocks = _blocks(fake_api)
        assert not [b for b in blocks if b["type"] == "image"]
        assert any("our new office [sent a photo]" in b.get("text", "") for b in blocks)
        assert tg._world.downloads == [] and not list(h.workspace.rglob("inbox"))
