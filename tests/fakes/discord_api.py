"""A local fake Discord: REST (API v10) over HTTP and the gateway over a websocket.

discord.py talks to it unchanged through ROOST_DISCORD__API_BASE (`api_base`) and
ROOST_DISCORD__GATEWAY_URL (`gateway_url`). It is strict where Discord is:
- every REST call but interaction callbacks/webhooks needs `Authorization: Bot <token>` (401);
- content over 2000 characters, more than 5 rows or 5 buttons per row, a custom_id over 100
  characters or a label over 80 → 400 with code 50035 (Invalid Form Body); nothing → 50006;
- an interaction must be answered within `interaction_deadline_s` (3 s) and only once:
  later → 404 code 10062 (Unknown interaction), twice → 400 code 40060;
- `rate_limit_next(...)` answers the next matching call with 429, `retry_after` and the
  X-RateLimit headers (nothing takes effect);
- gateway: HELLO, IDENTIFY (wrong token → close 4004; the Message Content intent without
  the application flag → close 4014), READY + GUILD_CREATE, heartbeat ACK, RESUME replays
  what was missed (`refuse_next_resume` answers opcode 9 instead: a new session, nothing
  replayed); without the Message Content intent guild messages that do not mention
  the bot arrive with empty content, as on Discord;
- `fail_next(...)` refuses the next matching calls (403 Missing Permissions by default);
- channel history (GET /channels/{id}/messages) as Discord serves it: newest first, `after`
  the messages right after it, `before` (or neither) the newest before it, limit 1–100,
  after+before refused; a message said while no session is connected (the bot stopped,
  or between a drop and a refused RESUME) is only in the history; `say(at=…)` dates one
  in the past; `hold_connections` keeps a reconnecting client out while a test fills a gap,
  `hold_history` keeps history reads waiting (a slow catch-up);
- several sessions of one bot token may be connected at once, as on Discord: every event
  goes to each (one bot process twice answers everything twice); `connected_sessions` and
  `peak_sessions` say how many are (and were at most) connected together. A session the
  client closes with 1000/1001 ends (Discord invalidates it); one whose connection just
  drops stays resumable and keeps its missed events;
- `lose_next_answer(...)` carries out the next matching call and cuts the connection;
- every request that can carry content (sends, edits, interaction responses and follow-ups)
  must carry `allowed_mentions` that parses nothing: else 400 and it is recorded
  (`unsuppressed`);
- a send with `enforce_nonce` and a nonce already used in the channel returns the first
  message instead of posting again (Discord's idempotent send); `forget_nonces()` ends that,
  as the few minutes Discord remembers a nonce do.
Every REST call is recorded (`calls`). The server runs aiohttp in its own thread and loop.
The REST routes live in tests/fakes/discord_rest.py (a mixin); the gateway and the world here.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

from tests.fakes.discord_rest import EPHEMERAL, DiscordRest, _Failure, _RateLimit
from tests.fakes.discord_state import Call, Channel, Interaction, State, StoredMessage, iso_now, snowflake

T = TypeVar("T")

API_PREFIX = "/api/v10"
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
FLAG_MESSAGE_CONTENT = 1 << 19
FLAG_MESSAGE_CONTENT_LIMITED = 1 << 18


@dataclass
class _Session:
    id: str
    intents: int
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None


class FakeDiscord(DiscordRest):
    """See the module docstring. Use as a context manager (starts and stops the server)."""

    def __init__(
        self,
        *,
        token: str,
        bot_id: str = "900000000000000001",
        bot_name: str = "roost",
        message_content_enabled: bool = True,
        interaction_deadline_s: float = 3.0,
        heartbeat_interval_ms: int = 41250,
    ) -> None:
        self.token = token
        self.bot_id = bot_id
        self.application_id = bot_id
        self.cdn: dict[str, bytes] = {}
        """Attachment bytes users posted, by URL path (GET /attachments/…)."""
        self.cdn_gets: list[str] = []
        self.message_content_enabled = message_content_enabled
        self.interaction_deadline_s = interaction_deadline_s
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.state = State()
        self.state.users[bot_id] = _user(bot_id, bot_name, bot=True)
        self._sessions: dict[str, _Session] = {}
        self.peak_sessions = 0
        """The most gateway sessions ever connected at the same time."""
        self._rate_limits: list[_RateLimit] = []
        self._lose: list[tuple[str, str]] = []
        self._failures: list[_Failure] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.gateway_closes: list[int] = []
        self._refuse_resumes = 0
        self._accepting = threading.Event()
        self._accepting.set()
        self._history_open = threading.Event()
        self._history_open.set()
        self.history_waiting = 0
        """History reads waiting for `release_history`."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> FakeDiscord:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True, name="fake-discord")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake Discord did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{tail:.*}", self._cdn_get)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        loop.run_forever()
        loop.close()

    async def _stop(self) -> None:
        for session in self._sessions.values():
            if session.ws is not None and not session.ws.closed:
                await session.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # -- world -----------------------------------------------------------------------

    def add_user(self, user_id: str, name: str) -> str:
        with self.state.cond:
            self.state.users[user_id] = _user(user_id, name)
            channel_id = f"{user_id}0"
            self.state.channels[channel_id] = Channel(channel_id, 1, recipient_id=user_id, name="")
        return channel_id

    def dm_channel(self, user_id: str) -> str:
        return f"{user_id}0"

    def add_guild(self, guild_id: str, channel_ids: list[str], name: str = "guild") -> None:
        with self.state.cond:
            self.state.guilds[guild_id] = {"id": guild_id, "name": name}
            for cid in channel_ids:
                self.state.channels[cid] = Channel(cid, 0, guild_id=guild_id, name=f"chan-{cid}")

    def add_thread(self, thread_id: str, parent_id: str) -> None:
        with self.state.cond:
            parent = self.state.channels[parent_id]
            self.state.channels[thread_id] = Channel(thread_id, 11, guild_id=parent.guild_id, parent_id=parent_id)
        self._dispatch_soon("THREAD_CREATE", lambda: {**self.state.channel_payload(self.state.channels[thread_id]), "newly_created": True})

    # -- inbound events (what users do) ------------------------------------------------

    def say(
        self,
        channel_id: str,
        user_id: str,
        content: str,
        *,
        mention_bot: bool = False,
        reply_to: str | None = None,
        message_id: str | None = None,
        at: datetime | None = None,
        files: list[tuple[str, str, bytes]] = (),  # type: ignore[assignment]
        voice: bool = False,
    ) -> str:
        """A user posts a message; dispatched as MESSAGE_CREATE to the live session (none
        while the bot is stopped: it stays in the channel's history only). `at` dates it in
        the past. `files` are (name, content type, bytes) attachments served at their CDN URL
        (404 for any other path); `voice` flags the message as a voice message (its one file
        the audio). Returns its id."""
        with self.state.cond:
            msg = StoredMessage(message_id or snowflake(at), channel_id, user_id, content, reference=reply_to)
            replied = self.state.messages.get(reply_to or "")
            if mention_bot or (replied is not None and replied.author_id == self.bot_id):
                msg.mentions = [self.bot_id]
            for name, content_type, data in files:
                aid = snowflake()
                path = f"/attachments/{channel_id}/{aid}/{name}"
                self.cdn[path] = data
                url = f"http://127.0.0.1:{self.port}{path}"
                item: dict[str, Any] = {"id": aid, "filename": name, "size": len(data), "url": url,
                                        "proxy_url": url, "content_type": content_type}
                if voice:
                    item.update(duration_secs=2.0, waveform="AAAA")
                msg.attachments.append(item)
            if voice:
                msg.flags |= 1 << 13  # IS_VOICE_MESSAGE
            self.state.messages[msg.id] = msg
            self.state.order.append(msg.id)
            payload = self.state.message_payload(msg)  # with the replied-to message resolved
            channel = self.state.channels[channel_id]
            if channel.guild_id:
                payload["member"] = {"roles": [], "joined_at": iso_now(), "deaf": False, "mute": False}
        self.state.changed()
        self._dispatch_soon("MESSAGE_CREATE", lambda: payload)
        return msg.id

    async def _cdn_get(self, request: web.Request) -> web.Response:
        with self.state.cond:
            data = self.cdn.get(request.path)
            self.cdn_gets.append(request.path)
        if data is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=data, content_type="application/octet-stream")

    def post_as_bot(self, channel_id: str, content: str, components: list[dict[str, Any]] | None = None) -> str:
        """A message the bot posted earlier (e.g. by a process that has since died)."""
        with self.state.cond:
            msg = StoredMessage(snowflake(), channel_id, self.bot_id, content, components=components or [])
            self.state.messages[msg.id] = msg
            self.state.order.append(msg.id)
        self.state.changed()
        return msg.id

    def redeliver(self, message_id: str) -> None:
        """Dispatch a MESSAGE_CREATE again (a redelivered gateway event)."""
        with self.state.cond:
            payload = self.state.message_payload(self.state.messages[message_id])
        self._dispatch_soon("MESSAGE_CREATE", lambda: payload)

    def press(self, message_id: str, user_id: str, custom_id: str | None = None, *, label: str | None = None) -> str:
        """A user presses a button (by custom_id or label); returns the interaction id."""
        with self.state.cond:
            message = self.state.messages[message_id]
            if custom_id is None:
                custom_id = message.custom_ids[label or ""]
            interaction = self._new_interaction(message.channel_id, user_id, message_id)
            payload = self._interaction_payload(interaction, 3, {"custom_id": custom_id, "component_type": 2})
            payload["message"] = self.state.message_payload(message)
        self._dispatch_soon("INTERACTION_CREATE", lambda: payload)
        return interaction.id

    def slash(self, channel_id: str, user_id: str, name: str, options: dict[str, str] | None = None) -> str:
        """A user runs a slash command; returns the interaction id."""
        with self.state.cond:
            interaction = self._new_interaction(channel_id, user_id, None)
            registered = next((c for c in self.state.commands if c["name"] == name), None)
            data = {
                "id": registered["id"] if registered else snowflake(),
                "name": name,
                "type": 1,
                "options": [{"name": k, "type": 3, "value": v} for k, v in (options or {}).items()],
            }
            payload = self._interaction_payload(interaction, 2, data)
        self._dispatch_soon("INTERACTION_CREATE", lambda: payload)
        return interaction.id

    def _new_interaction(self, channel_id: str, user_id: str, message_id: str | None) -> Interaction:
        interaction = Interaction(snowflake(), f"tok-{snowflake()}", channel_id, user_id, time.monotonic(), message_id)
        self.state.interactions[interaction.id] = interaction
        return interaction

    def _interaction_payload(self, interaction: Interaction, kind: int, data: dict[str, Any]) -> dict[str, Any]:
        channel = self.state.channels[interaction.channel_id]
        payload: dict[str, Any] = {
            "id": interaction.id,
            "application_id": self.application_id,
            "type": kind,
            "data": data,
            "channel_id": channel.id,
            "channel": self.state.channel_payload(channel),
            "token": interaction.token,
            "version": 1,
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {"0": channel.guild_id or "0"},
            "context": 0 if channel.guild_id else 1,
            "attachment_size_limit": 8 * 1024 * 1024,
        }
        user = self.state.user_payload(interaction.user_id)
        if channel.guild_id:
            payload["guild_id"] = channel.guild_id
            payload["guild_locale"] = "en-US"
            payload["member"] = {
                "user": user, "roles": [], "joined_at": iso_now(), "deaf": False, "mute": False,
                "permissions": "0", "flags": 0,
            }
        else:
            payload["user"] = user
        return payload

    # -- faults ----------------------------------------------------------------------

    def rate_limit_next(self, method: str, path_prefix: str, retry_after: float) -> None:
        with self.state.cond:
            self._rate_limits.append(_RateLimit(method, path_prefix, retry_after))

    def fail_next(
        self, method: str, path_prefix: str, *, status: int = 403, code: int = 50013,
        message: str = "Missing Permissions", count: int = 1, after: int = 0,
    ) -> None:
        """Refuse `count` matching calls, after letting `after` through, with `status` and
        error `code` (nothing takes effect), as Discord refuses a channel the bot may no
        longer write to."""
        with self.state.cond:
            self._failures.append(_Failure(method, path_prefix, status, code, message, count, after))

    def forget_nonces(self) -> None:
        """Discord checks a nonce's uniqueness only "in the past few minutes": after this, a
        send with a nonce used before posts a new message, as it would once that has passed."""
        with self.state.cond:
            for message in self.state.messages.values():
                message.nonce = None

    def lose_next_answer(self, method: str, path_prefix: str) -> None:
        """Carry out the next matching call, then cut the connection instead of answering
        (the client cannot tell whether it took effect)."""
        with self.state.cond:
            self._lose.append((method, path_prefix))

    def hold_connections(self) -> None:
        """New gateway connections wait (no HELLO) until `release_connections`: a gap the
        test can fill with messages, however fast the client reconnects."""
        self._accepting.clear()

    def release_connections(self) -> None:
        self._accepting.set()

    def hold_history(self) -> None:
        """History reads wait until `release_history` (a slow catch-up)."""
        self._history_open.clear()

    def release_history(self) -> None:
        self._history_open.set()

    def refuse_next_resume(self) -> None:
        """Answer the next RESUME with opcode 9 (invalid session, d=false): the client must
        IDENTIFY a new session, into which nothing of the gap is replayed."""
        with self.state.cond:
            self._refuse_resumes += 1

    def drop_gateway(self) -> None:
        """Close every connected gateway connection abnormally (the client should RESUME)."""
        self._run(self._drop())

    async def _drop(self) -> None:
        for session in list(self._sessions.values()):
            if session.ws is not None:
                ws, session.ws = session.ws, None
                await ws.close(code=4000, message=b"dropped by the test")

    # -- inspection ------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self.state.cond:
            return list(self.state.calls)

    def bot_messages(self, channel_id: str, *, ephemeral: bool = False) -> list[StoredMessage]:
        with self.state.cond:
            return [
                m for mid in self.state.order
                if (m := self.state.messages[mid]).channel_id == channel_id
                and m.author_id == self.bot_id and not m.deleted
                and bool(m.flags & EPHEMERAL) == ephemeral
            ]

    @property
    def unsuppressed(self) -> list[str]:
        """Requests refused for carrying no `allowed_mentions` that suppresses pings."""
        with self.state.cond:
            return list(self.state.unsuppressed)

    def message(self, message_id: str) -> StoredMessage:
        with self.state.cond:
            return self.state.messages[message_id]

    def interaction(self, interaction_id: str) -> Interaction:
        with self.state.cond:
            return self.state.interactions[interaction_id]

    async def await_for(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        return await self.state.await_for(predicate, timeout)

    @property
    def connected(self) -> bool:
        return self.connected_sessions > 0

    @property
    def connected_sessions(self) -> int:
        """Gateway sessions of the bot connected now (each receives every event)."""
        return sum(1 for s in list(self._sessions.values()) if s.ws is not None and not s.ws.closed)

    def _attach(self, session: _Session, ws: web.WebSocketResponse) -> None:
        session.ws = ws
        self.peak_sessions = max(self.peak_sessions, self.connected_sessions)

    # -- gateway ---------------------------------------------------------------------

    def _dispatch_soon(self, event: str, payload: Callable[[], dict[str, Any]]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._dispatch(event, payload())))  # type: ignore[union-attr]

    async def _dispatch(self, event: str, data: dict[str, Any], to: _Session | None = None) -> None:
        """To `to`, or to every session (connected or resumable) of the bot."""
        for session in [to] if to is not None else list(self._sessions.values()):
            seen = self._visible(session, data) if event == "MESSAGE_CREATE" else data
            if seen is None:
                continue
            session.seq += 1
            frame = {"op": 0, "t": event, "s": session.seq, "d": seen}
            session.events.append(frame)
            if session.ws is not None and not session.ws.closed:
                await session.ws.send_str(json.dumps(frame))

    def _visible(self, session: _Session, data: dict[str, Any]) -> dict[str, Any] | None:
        in_guild = "guild_id" in data
        needed = INTENT_GUILD_MESSAGES if in_guild else INTENT_DIRECT_MESSAGES
        if not session.intents & needed:
            return None
        mentioned = any(u["id"] == self.bot_id for u in data.get("mentions", []))
        if in_guild and not mentioned and data["author"]["id"] != self.bot_id and not session.intents & INTENT_MESSAGE_CONTENT:
            data = {**data, "content": "", "embeds": [], "attachments": [], "components": []}
        return data

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        await asyncio.to_thread(self._accepting.wait, 30)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            op, d = frame.get("op"), frame.get("d")
            if op == 1:
                await ws.send_str(json.dumps({"op": 11}))
            elif op == 2:
                await self._identify(ws, d)
            elif op == 6:
                await self._resume(ws, d)
        if ws.close_code is not None:
            self.gateway_closes.append(ws.close_code)
        for session in list(self._sessions.values()):
            if session.ws is ws:
                session.ws = None
                if ws.close_code in (1000, 1001):  # a client's clean close ends its session
                    self._sessions.pop(session.id, None)
        self.state.changed()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, d: dict[str, Any]) -> None:
        self.identifies.append({k: v for k, v in d.items() if k != "token"})
        if d.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(d.get("intents", 0))
        if intents & INTENT_MESSAGE_CONTENT and not self.message_content_enabled:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        session = _Session(snowflake(), intents)
        self._sessions[session.id] = session
        self._attach(session, ws)
        with self.state.cond:
            guilds = list(self.state.guilds)
            ready = {
                "v": 10,
                "user": self.state.user_payload(self.bot_id),
                "guilds": [{"id": g, "unavailable": True} for g in guilds],
                "session_id": session.id,
                "resume_gateway_url": self.gateway_url,
                "private_channels": [],
                "relationships": [],
                "application": {"id": self.application_id, "flags": self._app_flags()},
            }
        await self._dispatch("READY", ready, session)
        for guild_id in guilds:
            await self._dispatch("GUILD_CREATE", self._guild_payload(guild_id), session)
        self.state.changed()

    async def _resume(self, ws: web.WebSocketResponse, d: dict[str, Any]) -> None:
        self.resumes.append({k: v for k, v in d.items() if k != "token"})
        session = self._sessions.get(d.get("session_id", ""))
        with self.state.cond:
            refused, self._refuse_resumes = self._refuse_resumes > 0, max(0, self._refuse_resumes - 1)
        if d.get("token") != self.token or session is None or refused:
            if session is not None:
                self._sessions.pop(session.id, None)  # its missed events are gone with it
            await ws.send_str(json.dumps({"op": 9, "d": False}))
            return
        self._attach(session, ws)
        for frame in session.events:
            if frame["s"] > int(d.get("seq") or 0):
                await ws.send_str(json.dumps(frame))
        await self._dispatch("RESUMED", {}, session)
        self.state.changed()

    def _app_flags(self) -> int:
        return FLAG_MESSAGE_CONTENT if self.message_content_enabled else 0

    def _guild_payload(self, guild_id: str) -> dict[str, Any]:
        with self.state.cond:
            chans = [c for c in self.state.channels.values() if c.guild_id == guild_id]
            return {
                "id": guild_id,
                "name": self.state.guilds[guild_id]["name"],
                "unavailable": False,
                "owner_id": self.bot_id,
                "member_count": 2,
                "large": False,
                "features": [],
                "emojis": [],
                "stickers": [],
                "roles": [{
                    "id": guild_id, "name": "@everyone", "permissions": str((1 << 41) - 1), "position": 0,
                    "color": 0, "hoist": False, "managed": False, "mentionable": False, "flags": 0,
                }],
                "channels": [self.state.channel_payload(c) for c in chans if c.type != 11],
                "threads": [self.state.channel_payload(c) for c in chans if c.type == 11],
                "members": [{
                    "user": self.state.user_payload(self.bot_id), "roles": [], "joined_at": iso_now(),
                    "deaf": False, "mute": False, "flags": 0,
                }],
                "voice_states": [],
                "presences": [],
                "stage_instances": [],
                "guild_scheduled_events": [],
                "soundboard_sounds": [],
                "joined_at": iso_now(),
                "verification_level": 0,
                "default_message_notifications": 0,
                "explicit_content_filter": 0,
                "mfa_level": 0,
                "nsfw_level": 0,
                "premium_tier": 0,
                "preferred_locale": "en-US",
                "system_channel_flags": 0,
            }


def _user(user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id, "username": name, "global_name": name.title(), "discriminator": "0",
        "avatar": None, "bot": bot, "public_flags": 0,
    }
