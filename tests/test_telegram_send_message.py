"""send_message over the wire: the model's separate message reaches the chat, confirmed."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)


async def test_send_message_is_delivered_and_confirmed(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    fake_api.script(
        reply_tools(ToolUse("send_message", {"text": "Reminder: stand-up at 10"})),
        reply_text("I sent the reminder."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "remind me")
        reminder = await h.bot_text(OWNER, lambda t: t == "Reminder: stand-up at 10")
        await h.bot_text(OWNER, lambda t: "I sent the reminder." in t)
        result = user_blocks(fake_api.requests[1].json)[0]
        assert result["type"] == "tool_result" and not result.get("is_error")
        assert f"message {reminder.message_id}" in result["content"]
