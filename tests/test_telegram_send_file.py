"""send_file: the model sends a workspace file to the chat it answers (Telegram sendPhoto
for images, sendDocument otherwise), under the policy engine; a group may send only files in
its own folder — never main's files, another group's, or the identity files it can read."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.media_support import jpeg
from tests.telegram_harness import GROUP, OWNER, running, tg  # noqa: F401  (fixture)

GROUP_POLICY = {"groups": {f"telegram:{GROUP}": {"tools": {"send_file": "allow"}}}}


def _tool_result(fake_api: FakeAnthropic, index: int) -> str:
    return str(next(b for b in user_blocks(fake_api.requests[index].json) if b["type"] == "tool_result")["content"])


async def test_send_file_posts_a_document_and_a_photo_to_the_owners_chat(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        (h.workspace / "reports").mkdir(parents=True, exist_ok=True)
        (h.workspace / "reports" / "week.csv").write_text("day,steps\nmon,9000\n")
        (h.workspace / "chart.png").write_bytes(jpeg(300, 200))
        fake_api.script(
            reply_tools(ToolUse("send_file", {"path": "reports/week.csv", "caption": "your week"}),
                        ToolUse("send_file", {"path": "chart.png"})),
            reply_text("sent both"),
        )
        tg.send_private(OWNER, "send me the report and the chart")
        await h.says(OWNER, "sent both")
        docs = [m for m in tg.bot_messages(OWNER) if m.document is not None]
        photos = [m for m in tg.bot_messages(OWNER) if m.photo is not None]
        assert [(m.document.file_name, m.document.data, m.caption) for m in docs] == [
            ("week.csv", b"day,steps\nmon,9000\n", "your week")
        ]
        assert len(photos) == 1 and photos[0].photo.data == (h.workspace / "chart.png").read_bytes()


async def test_send_file_from_a_group_cannot_send_a_file_outside_that_groups_folder(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False, policy=GROUP_POLICY) as h:
        (h.workspace / "inbox").mkdir(parents=True, exist_ok=True)
        (h.workspace / "inbox" / "owner.txt").write_text("owner's private file")
        tg.send_media(GROUP, 77, "document", b"group notes\n", file_name="notes.txt", mime_type="text/plain",
                      caption="keep this", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("echo:"))
        (own,) = [p.relative_to(h.workspace).as_posix() for p in h.workspace.rglob("notes.txt")]
        fake_api.script(
            reply_tools(ToolUse("send_file", {"path": "inbox/owner.txt"}),
                        ToolUse("send_file", {"path": "SOUL.md"}),
                        ToolUse("send_file", {"path": "../outside.txt"})),
            reply_text("could not"),
            reply_tools(ToolUse("send_file", {"path": own})),
            reply_text("sent yours"),
        )
        tg.send_group(GROUP, 77, "send me files", mention=True)
        await h.bot_text(GROUP, lambda t: t == "could not")
        results = [b for b in user_blocks(fake_api.requests[1 + 1].json) if b["type"] == "tool_result"]
        assert len(results) == 3 and all(r.get("is_error") for r in results)
        assert [m for m in tg.bot_messages(GROUP) if m.document is not None] == []
        assert "owner's private file" not in str([r.json for r in fake_api.requests])
        tg.send_group(GROUP, 77, "then send my notes", mention=True)
        await h.bot_text(GROUP, lambda t: t == "sent yours")
        (sent,) = [m for m in tg.bot_messages(GROUP) if m.document is not None]
        assert sent.document.data == b"group notes\n"


async def test_send_file_in_a_group_is_denied_unless_the_owner_allows_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_media(GROUP, 77, "document", b"group notes\n", file_name="notes.txt", mime_type="text/plain",
                      caption="keep this", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("echo:"))
        (own,) = [p.relative_to(h.workspace).as_posix() for p in h.workspace.rglob("notes.txt")]
        fake_api.script(reply_tools(ToolUse("send_file", {"path": own})), reply_text("done"))
        tg.send_group(GROUP, 77, "send my notes", mention=True)
        await h.bot_text(GROUP, lambda t: t == "done")
        assert [m for m in tg.bot_messages(GROUP) if m.document is not None] == []
        assert "send_file" in _tool_result(fake_api, 2) or "denied" in _tool_result(fake_api, 2).lower()
