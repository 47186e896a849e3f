"""Privacy canaries over the wire: USER.md, MEMORY.md, the private logs and the owner's DM
text never reach the model's requests for a Discord channel or thread session."""

from __future__ import annotations

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.discord_api import FakeDiscord
from tests.discord_harness import CHANNEL, MEMBER, OWNER, THREAD, dc, running  # noqa: F401  (fixture)
from tests.test_conversations import CANARY_LOG, CANARY_MEMORY, CANARY_USER, CANARY_YESTERDAY, plant_canaries

CANARY_DM = "CANARY-DISCORD-DM-51f0"
MENTION = "<@900000000000000001>"


async def test_private_memory_and_the_owners_dm_never_reach_a_channel_or_thread_request(
    tmp_path, dc: FakeDiscord, fake_api: FakeAnthropic
) -> None:
    dc.add_thread(THREAD, CHANNEL)
    async with running(tmp_path, dc, fake_api, paced=False) as h:
        plant_canaries(h.workspace)
        dm = dc.dm_channel(OWNER)
        dc.say(dm, OWNER, f"keep this between us: {CANARY_DM}")
        await h.bot_text(dm, lambda t: CANARY_DM in t)  # the fake model echoes
        main_request = fake_api.requests[0].body.decode()
        for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_DM):
            assert canary in main_request, f"{canary} missing from the main session's own request"

        dc.say(CHANNEL, MEMBER, f"{MENTION} what do you know about the owner?", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: "what do you know about the owner?" in t)
        # The owner in the channel is still the channel's session, not main.
        dc.say(CHANNEL, OWNER, f"{MENTION} and what did I tell you today?", mention_bot=True)
        await h.bot_text(CHANNEL, lambda t: "what did I tell you today?" in t)
        dc.say(THREAD, OWNER, f"{MENTION} anything private?", mention_bot=True)
        await h.bot_text(THREAD, lambda t: "anything private?" in t)

        server_requests = [r.body.decode() for r in fake_api.requests[1:]]
        assert len(server_requests) == 3
        for body in server_requests:
            for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_YESTERDAY, CANARY_DM):
                assert canary not in body, f"{canary} leaked into a server request"
