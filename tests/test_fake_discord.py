"""The fake Discord is strict where Discord is; checked with discord.py itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import discord
import pytest

from adapters.discord.endpoints import point_at
from tests.fakes.discord_api import FakeDiscord

TOKEN = "fake-token.for-the-fake"
USER = "111111111111111111"
NO_PINGS = discord.AllowedMentions.none()


@pytest.fixture
async def fake_and_client() -> AsyncIterator[tuple[FakeDiscord, discord.Client]]:
    with FakeDiscord(token=TOKEN, interaction_deadline_s=0.3) as fake:
        fake.add_user(USER, "olivia")
        fake.add_guild("500", ["501"])
        point_at(fake.api_base, fake.gateway_url)
        client = discord.Client(intents=discord.Intents.none(), allowed_mentions=NO_PINGS)
        await client.login(TOKEN)
        try:
            yield fake, client
        finally:
            await client.close()


async def test_a_wrong_token_gets_401() -> None:
    with FakeDiscord(token=TOKEN) as fake:
        point_at(fake.api_base, fake.gateway_url)
        client = discord.Client(intents=discord.Intents.none())
        try:
            with pytest.raises(discord.LoginFailure):
                await client.login("not-the-token")
        finally:
            await client.close()
        assert [c.status for c in fake.calls] == [401]


async def test_content_over_2000_characters_is_refused_with_50035(fake_and_client) -> None:
    fake, client = fake_and_client
    channel = client.get_partial_messageable(501)
    with pytest.raises(discord.HTTPException) as refused:
        await channel.send("x" * 2001)
    assert refused.value.status == 400 and refused.value.code == 50035
    sent = await channel.send("x" * 2000)
    with pytest.raises(discord.HTTPException) as refused:
        await sent.edit(content="y" * 2001)
    assert refused.value.code == 50035
    assert len(fake.bot_messages("501")) == 1


async def test_a_request_that_could_ping_is_refused_and_recorded(fake_and_client) -> None:
    """Discord would post it and ping; the fake refuses each such request so tests notice."""
    fake, client = fake_and_client
    channel = client.get_partial_messageable(501)
    sent = await channel.send("fine")
    for pings in (discord.AllowedMentions(everyone=True), discord.AllowedMentions.none().merge(
            discord.AllowedMentions(replied_user=True))):
        with pytest.raises(discord.HTTPException) as refused:
            await channel.send("@everyone hi", allowed_mentions=pings)
        assert refused.value.code == 50035
    route = discord.http.Route("PATCH", "/channels/{c}/messages/{m}", c=501, m=sent.id)
    with pytest.raises(discord.HTTPException):
        await client.http.request(route, json={"components": []})  # no content, but it could carry some
    assert [m.content for m in fake.bot_messages("501")] == ["fine"]
    assert fake.unsuppressed == ["POST /channels/501/messages"] * 2 + [f"PATCH /channels/501/messages/{sent.id}"]


async def test_button_limits_are_enforced(fake_and_client) -> None:
    fake, client = fake_and_client
    channel = client.get_partial_messageable(501)
    too_long = [{"type": 1, "components": [{"type": 2, "style": 1, "label": "x", "custom_id": "c" * 101}]}]
    six = [{"type": 1, "components": [
        {"type": 2, "style": 1, "label": str(n), "custom_id": f"b{n}"} for n in range(6)
    ]}]
    route = discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=channel.id)
    for components in (too_long, six):
        with pytest.raises(discord.HTTPException) as refused:
            await client.http.request(route, json={"content": "hi", "components": components,
                                                      "allowed_mentions": {"parse": []}})
        assert refused.value.code == 50035
    assert not fake.bot_messages("501")


async def test_an_interaction_answered_late_is_unknown_and_one_answered_twice_is_refused(fake_and_client) -> None:
    fake, client = fake_and_client
    sent = await client.get_partial_messageable(501).send("card")
    fake.state.messages[str(sent.id)].components = [
        {"type": 1, "components": [{"type": 2, "style": 1, "label": "go", "custom_id": "go"}]}
    ]
    iid = fake.press(str(sent.id), USER, "go")
    interaction = fake.interaction(iid)
    route = discord.http.Route("POST", "/interactions/{i}/{t}/callback", i=iid, t=interaction.token)
    await asyncio.sleep(0.35)  # past the (shortened) deadline: a sleep is the point here
    with pytest.raises(discord.NotFound) as unknown:
        await client.http.request(route, json={"type": 6})
    assert unknown.value.code == 10062
    fake.interaction_deadline_s = 3.0  # the second press must be answered in time, under load too
    iid = fake.press(str(sent.id), USER, "go")
    route = discord.http.Route("POST", "/interactions/{i}/{t}/callback", i=iid, t=fake.interaction(iid).token)
    await client.http.request(route, json={"type": 6})
    with pytest.raises(discord.HTTPException) as twice:
        await client.http.request(route, json={"type": 6})
    assert twice.value.code == 40060


async def test_429_carries_retry_after_and_rate_limit_headers_and_nothing_is_posted(fake_and_client) -> None:
    fake, client = fake_and_client
    fake.rate_limit_next("POST", "/channels/501/messages", 0.2)
    sent = await client.get_partial_messageable(501).send("once")  # discord.py waits and retries
    statuses = [c.status for c in fake.calls if c.path == "/channels/501/messages"]
    assert statuses == [429, 200]
    assert [m.content for m in fake.bot_messages("501")] == ["once"] and sent.content == "once"


async def test_a_repeated_nonce_returns_the_first_message(fake_and_client) -> None:
    fake, client = fake_and_client
    channel = client.get_partial_messageable(501)
    first = await channel.send("hello", nonce="n-1")
    again = await channel.send("hello", nonce="n-1")
    assert first.id == again.id and len(fake.bot_messages("501")) == 1


async def test_gateway_identify_ready_and_resume_replays_missed_events() -> None:
    with FakeDiscord(token=TOKEN, heartbeat_interval_ms=500) as fake:
        fake.add_user(USER, "olivia")
        point_at(fake.api_base, fake.gateway_url)
        intents = discord.Intents.none()
        intents.dm_messages = True
        intents.message_content = True
        client = discord.Client(intents=intents)
        seen: asyncio.Queue[str] = asyncio.Queue()
        ready = asyncio.Event()
        client.event(_on_ready(ready))
        client.event(_on_message(seen))
        await client.login(TOKEN)
        task = asyncio.get_running_loop().create_task(client.connect())
        try:
            async with asyncio.timeout(10):
                await ready.wait()
            fake.say(fake.dm_channel(USER), USER, "one")
            assert await asyncio.wait_for(seen.get(), 10) == "one"
            fake.drop_gateway()
            fake.say(fake.dm_channel(USER), USER, "two")  # while disconnected
            assert await asyncio.wait_for(seen.get(), 20) == "two"
            assert len(fake.identifies) == 1 and len(fake.resumes) == 1
        finally:
            await client.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _on_ready(ready: asyncio.Event):  # noqa: ANN202
    async def on_ready() -> None:
        ready.set()

    return on_ready


def _on_message(seen: asyncio.Queue[str]):  # noqa: ANN202
    async def on_message(message: discord.Message) -> None:
        await seen.put(message.content)

    return on_message


async def test_history_is_served_as_discord_serves_it(fake_and_client) -> None:
    """Newest first always; `after` gives the messages right after it, `before` (or nothing)
    the newest before it; limit 1–100; after and before together are refused. discord.py's
    `history` relies on each (its `after` paging takes data[0] as the next cursor)."""
    fake, client = fake_and_client
    ids = [fake.say("501", USER, f"m{n}") for n in range(7)]
    route = discord.http.Route("GET", "/channels/{c}/messages", c=501)

    async def get(**params: object) -> list[str]:
        return [m["content"] for m in await client.http.request(route, params=params)]

    assert await get(limit=3) == ["m6", "m5", "m4"]
    assert await get(after=ids[1], limit=3) == ["m4", "m3", "m2"]
    assert await get(before=ids[5], limit=2) == ["m4", "m3"]
    for bad in ({"limit": 0}, {"limit": 101}, {"after": ids[0], "before": ids[6]}):
        with pytest.raises(discord.HTTPException) as refused:
            await get(**bad)
        assert refused.value.status == 400
    channel = await client.fetch_channel(501)
    assert [m.content async for m in channel.history(after=discord.Object(int(ids[0])), limit=None)] == [
        f"m{n}" for n in range(1, 7)
    ]
    assert [m.content async for m in channel.history(limit=2)] == ["m6", "m5"]


async def test_a_refused_resume_answers_opcode_9_and_replays_nothing() -> None:
    with FakeDiscord(token=TOKEN, heartbeat_interval_ms=500) as fake:
        fake.add_user(USER, "olivia")
        point_at(fake.api_base, fake.gateway_url)
        seen: list[str] = []
        client = discord.Client(intents=discord.Intents.default())
        ready = asyncio.Event()

        @client.event
        async def on_ready() -> None:
            ready.set()

        @client.event
        async def on_message(message: discord.Message) -> None:
            seen.append(message.content)

        await client.login(TOKEN)
        connector = asyncio.get_running_loop().create_task(client.connect(reconnect=True))
        try:
            async with asyncio.timeout(10):
                await ready.wait()
            ready.clear()
            fake.refuse_next_resume()
            fake.hold_connections()
            fake.drop_gateway()
            fake.say(fake.dm_channel(USER), USER, "in the gap")
            fake.release_connections()
            async with asyncio.timeout(15):
                await ready.wait()  # a new session: READY again
            assert len(fake.resumes) == 1 and len(fake.identifies) == 2
            assert seen == []
            dm = await client.fetch_channel(int(fake.dm_channel(USER)))
            assert [m.content async for m in dm.history(limit=5)] == ["in the gap"]  # only in the history
        finally:
            await client.close()
            connector.cancel()
            await asyncio.gather(connector, return_exceptions=True)

