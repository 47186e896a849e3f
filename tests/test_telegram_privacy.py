"""Privacy canaries over the wire: what the owner keeps private never reaches the model's
requests for a Telegram group session."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import BOT_USERNAME, GROUP, MEMBER, OWNER, running, tg  # noqa: F401  (fixture)
from tests.test_conversations import CANARY_LOG, CANARY_MEMORY, CANARY_USER, CANARY_YESTERDAY, plant_canaries

CANARY_CHAT = "CANARY-PRIVATE-CHAT-8e21"


async def test_private_memory_and_todays_private_chat_never_reach_a_group_request(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        plant_canaries(h.workspace)
        tg.send_private(OWNER, f"keep this between us: {CANARY_CHAT}")
        await h.bot_text(OWNER, lambda t: CANARY_CHAT in t)
        main_request = fake_api.requests[0].body.decode()
        for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_CHAT):
            assert canary in main_request, f"{canary} missing from the main session's own request"

        tg.send_group(GROUP, MEMBER, "what do you know about the owner?", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: "what do you know about the owner?" in t)
        # The owner mentioning the bot in the group is still the group's session.
        tg.send_group(GROUP, OWNER, "and what did I tell you today?", mention=True, first_name="Olivia")
        await h.bot_text(GROUP, lambda t: "what did I tell you today?" in t)

        group_requests = [r.body.decode() for r in fake_api.requests[1:]]
        assert len(group_requests) == 2
        for body in group_requests:
            assert f"@{BOT_USERNAME}" in body
            for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_YESTERDAY, CANARY_CHAT):
                assert canary not in body, f"{canary} leaked into a group request"
