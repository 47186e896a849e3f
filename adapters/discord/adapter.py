"""The Discord adapter: discord.py's `Client` (gateway + REST), turned into `Inbound`
values for the `InboundHandler` and rendered replies back.

Lifecycle: `start(handler)` points discord.py at the configured REST base and gateway
(`endpoints.point_at`), logs in, and checks the application's Message Content flag: if it
is off, one warning line says how to fix it and the bot connects without that intent (DMs
and mentions still carry text; Discord would refuse the connection otherwise). Then it
connects (guilds, guild messages, DM messages, message content), waits for READY and
registers the slash commands in the background. discord.py reconnects a dropped gateway
itself and RESUMEs the session, so missed events are replayed, not lost. A new session (this
process's first, or after Discord refused a RESUME) replays nothing: after its READY the
gap of every watched chat is fetched through REST history and handed to the handler like
live messages, which wait until it is done (see adapters.catch_up). With replicas
(`InboundHandler.leads`), only the holder of the "discord-gateway" lead connects; the others
stay logged in for REST (sends, edits, files, typing), connect when the lead becomes theirs
(their READY's catch-up reads what came meanwhile) and close their session when it goes;
`hand_over` (SIGTERM) ends the session before letting the lead go. If start fails,
everything started so far is closed. `aclose` stops intake, lets messages in progress
finish briefly, drops queued sends and closes the client; it is idempotent.

Inbound: every user message goes to the handler with its guild as `space_id`; which guilds
and channels are answered is the router's business (ROOST_DISCORD__ALLOWED_GUILDS /
ALLOWED_CHANNELS). Messages of one channel reach the handler in arrival order.

Outgoing traffic: one `Outbox` paces every channel (≥ 1.2 s between requests) and pauses
on 429; discord.py's own rate-limit handling sits below it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import discord

from adapters.base import Button, Delivery, InboundHandler
from adapters.catch_up import CatchUp
from adapters.lifecycle import StartsOnce
from adapters.button_actions import PAIR_PREFIX
from adapters.discord.approval_views import (
    ActionButton,
    ApprovalButton,
    ApprovalPresses,
    DiscordCards,
    parse_card_ref,
    record_text,
)
from adapters.discord.commands import command_tree
from adapters.discord.catch_up import SessionCatchUp
from adapters.discord.endpoints import DEFAULT_API_BASE, adopt_gateway, needs_gateway_lookup, point_at
from adapters.discord.gateway import GATEWAY_ROLE, Gateway
from adapters.discord.reply import DiscordReply, ReplyContext
from adapters.discord.transport import DISCORD_LIMIT, EDIT_INTERVAL_S, NO_MENTIONS
from adapters.discord.updates import BotIdentity, command_inbound, to_inbound
from adapters.errors import DeliveryError, DeliveryUndecidable, MessageGone
from adapters.outbox import Clock, Outbox, Priority, Sleep
from adapters.pacing import through_outbox
from adapters.render.chunks import ChunkSpec, plan_chunks
from agent_core.inbound import ReplyTarget
from agent_core.ports import ApprovalRecord

log = logging.getLogger(__name__)

INTERRUPTED_NOTE = "\n\n… (interrupted: Roost restarted)"
MISSING_INTENT = (
    "discord: the Message Content intent is not enabled for this bot, so it reads only DMs "
    "and messages that mention it; fix: Discord Developer Portal → your application → Bot → "
    "Privileged Gateway Intents → enable MESSAGE CONTENT INTENT, then restart"
)
SPEC = ChunkSpec.create(DISCORD_LIMIT, "chars", True)


class DiscordStartError(RuntimeError):
    """The adapter could not connect (bad token, gateway refused, no READY in time)."""


def wanted_intents(*, message_content: bool) -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = message_content
    return intents


def content_intent_enabled(flags: discord.ApplicationFlags) -> bool:
    return bool(flags.gateway_message_content or flags.gateway_message_content_limited)


class _Client(discord.Client):
    """discord.py's client with Roost's event hooks (set by the adapter)."""

    def __init__(self, adapter: DiscordAdapter, intents: discord.Intents, guild_ready_timeout: float) -> None:
        super().__init__(
            intents=intents, max_messages=None, chunk_guilds_at_startup=False, guild_ready_timeout=guild_ready_timeout,
            # The default of every request discord.py builds (sends, edits, interaction
            # responses): a call site that forgets its own still pings nobody.
            allowed_mentions=NO_MENTIONS,
        )
        self._adapter = adapter
        self.ready = asyncio.Event()
        self.on_approval_press: Any = None
        self.on_action_press: Any = None

    async def setup_hook(self) -> None:
        # Registered once per client: any card's buttons resolve, also an old process's.
        self.add_dynamic_items(ApprovalButton, ActionButton)

    async def on_connect(self) -> None:
        # discord.py dispatches "connect" from every READY, i.e. for every new session (a
        # RESUME dispatches "resumed" instead), before any event of that session.
        self._adapter._new_session()

    async def on_ready(self) -> None:
        self.ready.set()
        self._adapter._session_ready()

    async def on_resumed(self) -> None:
        # A session resumed before its on_ready (a drop while guilds still arrived): its
        # guilds are known all the same; the catch-up must not wait for a READY to come.
        self._adapter._session_ready()

    async def on_message(self, message: discord.Message) -> None:
        await self._adapter._on_message(message)


NONCE_TRUSTED_S = 120.0
"""How long after an attempt its nonce is trusted to find what it posted (Discord checks
nonces "in the past few minutes"; two is a safe reading)."""


def once_nonce(key: str, part: int) -> str:
    """The nonce of chunk `part` of the keyed send `key` (Discord takes at most 25 characters)."""
    return hashlib.sha256(f"{key}:{part}".encode()).hexdigest()[:25]


class DiscordAdapter(StartsOnce):
    """Implements `adapters.base.Adapter` for Discord; see the module docstring."""

    platform = "discord"

    def __init__(
        self,
        token: str,
        *,
        api_base: str = DEFAULT_API_BASE,
        gateway_url: str | None = None,
        commands: Mapping[str, str] | None = None,
        edit_interval_s: float = EDIT_INTERVAL_S,
        ready_timeout_s: float = 30.0,
        guild_ready_timeout_s: float = 2.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        catch_up: CatchUp = CatchUp(),
        catch_up_timeout_s: float = 120.0,
    ) -> None:
        self._token = token
        self._api_base, self._gateway_url = api_base, gateway_url
        self._commands = dict(commands or {})
        self._interval = edit_interval_s
        self._ready_timeout = ready_timeout_s
        self._guild_ready_timeout = guild_ready_timeout_s
        """How long discord.py waits after READY for more guilds before on_ready."""
        self._clock, self._sleep = clock, sleep
        self._now, self._bounds, self._catch_up_timeout = now, catch_up, catch_up_timeout_s
        self._catch_up: SessionCatchUp | None = None
        self._state: Literal["new", "running", "closed"] = "new"
        self._client: _Client | None = None
        self._gateway: Gateway | None = None
        self._outbox: Outbox | None = None
        self._ctx: ReplyContext | None = None
        self._handler: InboundHandler | None = None
        self.approver_names: dict[str, str] = {}
        """`adapters.base.NamesApprovers`: the cards' names, by identity."""
        self._me: BotIdentity | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._inflight: set[asyncio.Task[Any]] = set()
        self._chains: dict[str, tuple[asyncio.Lock, int]] = {}
        self._interactions: dict[str, discord.Interaction] = {}
        self._answered: set[str] = set()
        self._channels: set[str] = set()
        """Channel ids seen in inbound messages (never a user id)."""
        self._dm_of: dict[str, str] = {}
        """User id → the DM channel opened for them."""
        self.message_content_missing = False
        """True when the application lacks the Message Content intent (see MISSING_INTENT)."""

    @property
    def bot_user_id(self) -> int | None:
        return self._me.id if self._me else None

    # -- lifecycle -------------------------------------------------------------------

    async def _login(self, *, message_content: bool) -> _Client:
        client = _Client(self, wanted_intents(message_content=message_content), self._guild_ready_timeout)
        self._client = client
        await client.login(self._token)
        return client

    async def _start(self, handler: InboundHandler) -> None:
        self._handler = handler
        if handler.channel_cursors is not None:
            self._catch_up = SessionCatchUp(
                handler.channel_cursors, self._take, now=self._now, bounds=self._bounds, timeout_s=self._catch_up_timeout
            )
            await self._catch_up.load()
        point_at(self._api_base, self._gateway_url)
        client = await self._login(message_content=True)
        if not content_intent_enabled(client.application_flags):
            log.warning(MISSING_INTENT)
            self.message_content_missing = True
            await client.close()  # intents are fixed per client: log in again without it
            client = await self._login(message_content=False)
        if needs_gateway_lookup(self._api_base, self._gateway_url):
            await adopt_gateway(client.http)
        assert client.user is not None
        self._me = BotIdentity(client.user.id, client.user.name)
        self._outbox = Outbox(clock=self._clock, sleep=self._sleep)
        await self._outbox.start()
        cards = DiscordCards(self._outbox, on_card=handler.note_approval_card)
        cards.names = self.approver_names
        client.on_approval_press = ApprovalPresses(cards, handler.decide)
        client.on_action_press = self._action
        self._ctx = ReplyContext(client, self._outbox, cards, handler, self._clock, self._sleep, self._interval)
        tree = command_tree(client, self._commands, self._slash) if self._commands else None
        lead = handler.leads(GATEWAY_ROLE) if handler.leads is not None else None
        self._gateway = Gateway(client, lead, on_close=self._save_cursors)
        if await self._gateway.start():  # a follower replica stays on REST (gateway.py)
            await self._ready(client, self._gateway)
        if tree is not None:
            self._spawn(self._sync_commands(tree))
        log.info("discord.started bot=%s id=%s", self._me.name, self._me.id)

    async def _ready(self, client: _Client, gateway: Gateway) -> None:
        """Wait for the first session's READY (start fails without one)."""
        assert gateway.connector is not None
        ready = asyncio.get_running_loop().create_task(client.ready.wait())
        try:
            await asyncio.wait({ready, gateway.connector}, timeout=self._ready_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if gateway.connector.done():
            exc = gateway.connector.exception()
            raise DiscordStartError(f"discord gateway closed before READY: {exc!r}") from exc
        if not client.ready.is_set():
            raise DiscordStartError(f"discord: no READY within {self._ready_timeout:g} s")

    async def _save_cursors(self) -> None:
        if self._catch_up is not None:  # where the next holder of the gateway starts reading
            await self._catch_up.cursors.flush()

    async def hand_over(self) -> None:
        """Shutting down with replicas: end the gateway session and let the lead go now, so
        another replica takes the messages in while this one finishes (sends still work)."""
        if self._gateway is not None and self._state == "running":
            await self._gateway.hand_over()

    async def _sync_commands(self, tree: discord.app_commands.CommandTree) -> None:  # type: ignore[type-arg]
        try:
            await tree.sync()
        except discord.HTTPException as exc:  # the bot works without the command menu
            log.warning("discord.commands_sync_failed: %s", exc)

    async def aclose(self, grace_s: float = 5.0) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        inflight = set(self._inflight)
        if inflight:
            _, late = await asyncio.wait(inflight, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._catch_up is not None:
            await _quietly("catch_up.aclose", self._catch_up.aclose())
        if self._outbox is not None:
            await self._outbox.aclose()
        if self._gateway is not None:  # with replicas: the session closed, then the lead let go
            await _quietly("gateway.hand_over", self._gateway.hand_over())
        if self._client is not None:
            await _quietly("client.close", self._client.close())
        if self._gateway is not None:
            await _quietly("gateway.aclose", self._gateway.aclose())
        log.info("discord.closed")

    async def __aenter__(self) -> DiscordAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- inbound ---------------------------------------------------------------------

    async def _on_message(self, message: discord.Message) -> None:
        if self._state != "running" or self._me is None or self._handler is None:
            return
        if self._catch_up is not None:
            await self._catch_up.wait()
        if self._state == "running":
            await self._take(message)

    async def _take(self, message: discord.Message) -> None:
        """A message, live or fetched after a gap, to the handler in its channel's order;
        its channel's cursor moves past it only once the handler has stored it."""
        assert self._me is not None and self._handler is not None
        channel = str(message.channel.id)
        inbound = to_inbound(message, self._me)
        if inbound is not None:
            self._channels.add(channel)
            try:
                await self._in_order(channel, self._handler.receive(inbound))
            except BaseException:
                if self._catch_up is not None:  # it may not be stored: no later one moves past it
                    self._catch_up.cursors.hold(channel)
                raise
        if self._catch_up is not None:
            self._catch_up.cursors.note(channel, str(message.id))

    # -- catching up after a gap (adapters.discord.catch_up) -------------------------

    async def caught_up(self) -> None:
        """Returns once no catch-up is running (each message it read is with the handler)."""
        if self._catch_up is not None:
            await self._catch_up.wait()

    def _new_session(self) -> None:
        if self._catch_up is None or self._state != "running" or self._client is None:
            return
        task = self._catch_up.new_session(self._client)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _session_ready(self) -> None:
        if self._catch_up is not None:
            self._catch_up.session_ready()

    async def _in_order(self, key: str, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` after earlier work of the same channel (asyncio locks are FIFO), and
        let `aclose` wait for it."""
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        lock, users = self._chains.get(key, (asyncio.Lock(), 0))
        self._chains[key] = (lock, users + 1)
        try:
            async with lock:
                await work
        finally:
            lock, users = self._chains[key]
            if users <= 1:
                del self._chains[key]
            else:
                self._chains[key] = (lock, users - 1)
            if task is not None:
                self._inflight.discard(task)

    async def _slash(self, interaction: discord.Interaction, text: str) -> None:
        """A slash command: acknowledged at once (ephemeral "thinking"), handled like the
        typed command; what the handler answers goes back as the ephemeral response."""
        if self._state != "running" or self._handler is None:
            return
        await interaction.response.defer(ephemeral=True, thinking=True)
        inbound = command_inbound(interaction, text)
        key = inbound.message_id or ""
        self._interactions[key] = interaction
        try:
            await self._in_order(inbound.chat_id, self._handler.receive(inbound))
        finally:
            self._interactions.pop(key, None)
            if key not in self._answered:
                await _followup(interaction, "Nothing to say here.")
            self._answered.discard(key)

    async def _action(self, interaction: discord.Interaction, action: str) -> None:
        """A standalone message's button: "pair:<code>" (the owner approves a pairing) or
        a generic one the handler decides (`press_button`); done → the message shows the
        result and loses its buttons, refused → an ephemeral answer and nothing changes."""
        await interaction.response.defer()
        assert self._handler is not None
        identity = f"discord:{interaction.user.id}"
        if action.startswith(PAIR_PREFIX):
            code = action[len(PAIR_PREFIX) :]
            result, done = await self._handler.approve_pairing("discord", code, identity), True
        else:
            answer = await self._handler.press_button("discord", action, identity)
            result, done = answer.text, answer.done
        if not done:
            await _followup(interaction, result)
            return
        text = interaction.message.content if interaction.message else ""
        try:
            await interaction.edit_original_response(content=f"{text}\n\n{result}"[:DISCORD_LIMIT], view=None,
                                                     allowed_mentions=NO_MENTIONS)
        except discord.HTTPException as exc:
            log.warning("discord.button_edit_failed: %s", exc)

    # -- outbound --------------------------------------------------------------------

    def _running(self) -> ReplyContext:
        if self._state != "running" or self._ctx is None:
            raise RuntimeError("DiscordAdapter is not running")
        return self._ctx

    async def send_file(
        self, target: ReplyTarget, data: bytes, filename: str, *, caption: str = "", send_as: str = "document"
    ) -> str:
        """`adapters.media.FileSender`: one message with the file attached (Discord shows
        images and audio inline; there is no separate photo or voice kind for bots)."""
        ctx = self._running()
        target = await self._resolved(target)
        transport = ctx.transport_for(target, quote=False)

        async def send() -> str:
            return await transport.send_file(data, filename, caption[:2000])

        return await through_outbox(ctx.outbox, transport.chat_key, send, interval=transport.min_edit_interval_s)

    async def fetch_attachment(self, attachment: Any, max_bytes: int) -> bytes:
        """`adapters.media.MediaFetcher`: an attachment's URL, through discord.py's session."""
        from adapters.media import TooBig, Unavailable

        if self._client is None:
            raise RuntimeError("DiscordAdapter is not running")
        if attachment.size is not None and attachment.size > max_bytes:
            raise TooBig(attachment.size, max_bytes, attachment.name)
        try:
            data = await self._client.http.get_from_cdn(attachment.ref)
        except discord.HTTPException as exc:
            raise Unavailable(f"Discord would not give me that file ({exc.status}).") from None
        if len(data) > max_bytes:
            raise TooBig(len(data), max_bytes, attachment.name)
        return data

    def open_reply(self, target: ReplyTarget) -> DiscordReply:
        ctx = self._running()
        # In a guild the answer replies to the message that asked (a DM needs no quoting).
        in_guild = isinstance(ctx.client.get_channel(int(target.chat_id)), discord.abc.GuildChannel)
        return DiscordReply(ctx, target, quote=in_guild)

    async def send_text(self, target: ReplyTarget, text: str, *, buttons: Sequence[Button] = ()) -> str:
        """Markdown split at 2000 characters; buttons go on the last message. The answer
        to a slash command goes back ephemerally to the person who ran it."""
        ctx = self._running()
        chunks = [p.text for p in plan_chunks(text, SPEC)]
        if not chunks:
            raise DeliveryError("refusing to send an empty message")
        interaction = self._interactions.get(target.reply_to or "")
        if interaction is not None and not buttons:
            self._answered.add(target.reply_to or "")
            message_id = ""
            for chunk in chunks:
                message_id = await _followup(interaction, chunk) or message_id
            return message_id
        return await self._post_chunks(target, chunks, buttons, None)

    async def send_once(
        self,
        target: ReplyTarget,
        text: str,
        key: str,
        *,
        buttons: Sequence[Button] = (),
        uncertain_for: float | None = None,
    ) -> str:
        """`adapters.base.OnceSender`: every attempt posts each chunk under the same nonce,
        derived from `key`, with `enforce_nonce` — Discord answers a nonce it has seen in the
        channel with the message already posted, so an attempt after a lost answer is itself
        the check. Discord checks nonces only "in the past few minutes": an earlier attempt
        older than `NONCE_TRUSTED_S` may have posted a message the nonce no longer finds, so
        that attempt is refused (`DeliveryUndecidable`) rather than risk a second copy."""
        if uncertain_for is not None and uncertain_for > NONCE_TRUSTED_S:
            raise DeliveryUndecidable(
                f"an attempt {uncertain_for:.0f} s ago may have posted it; Discord no longer matches its nonce"
            )
        self._running()
        chunks = [p.text for p in plan_chunks(text, SPEC)]
        if not chunks:
            raise DeliveryError("refusing to send an empty message")
        return await self._post_chunks(target, chunks, buttons, key)

    async def _post_chunks(
        self, target: ReplyTarget, chunks: Sequence[str], buttons: Sequence[Button], key: str | None
    ) -> str:
        ctx = self._running()
        target = await self._resolved(target)
        transport = ctx.transport_for(target, quote=False)
        view = None
        if buttons:
            view = discord.ui.View(timeout=None)
            for b in buttons[:25]:
                if len(b.action) > 100:  # Discord's custom_id limit: a cut action would do something else
                    log.error("discord.button_action_too_long action=%r", b.action[:40])
                    continue
                view.add_item(ActionButton(b.label, b.action))
        message_id = ""
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            nonce = None if key is None else once_nonce(key, n)

            async def send(text: str = chunk, v: discord.ui.View | None = view if last else None,
                           nonce: str | None = nonce) -> str:
                return await transport.send(text, [], view=v, nonce=nonce)

            message_id = await through_outbox(ctx.outbox, transport.chat_key, send, interval=transport.min_edit_interval_s)
        return message_id

    async def _resolved(self, target: ReplyTarget) -> ReplyTarget:
        """A private target may name a user (e.g. the owner to tell about a pairing), not a
        channel: Discord DMs have channel ids of their own, opened once and remembered."""
        ctx = self._running()
        chat = target.chat_id
        # An answer (`reply_to`) is to a message, so in a channel: a replica that never held
        # the gateway has no channel cache and must not mistake it for a user.
        if target.thread_id or target.reply_to or chat in self._channels or ctx.client.get_channel(int(chat)) is not None:
            return target
        if chat not in self._dm_of:
            try:
                dm = await ctx.client.create_dm(discord.Object(int(chat)))
            except discord.HTTPException:  # not a user: a channel we have not seen yet
                self._channels.add(chat)
                return target
            self._dm_of[chat] = str(dm.id)
        return ReplyTarget(target.platform, self._dm_of[chat], None, target.reply_to)

    async def close_expired_card(self, record: ApprovalRecord) -> None:
        """Edit a card left live by a previous process to its final state, without buttons."""
        ctx = self._running()
        where = parse_card_ref(record.chat_ref or "")
        if where is None:
            return
        channel_id, message_id = where
        transport = ctx.transport(channel_id)
        text = record_text(record, None)
        try:
            await through_outbox(
                ctx.outbox, transport.chat_key,
                lambda: transport.edit(str(message_id), text, [], remove_view=True),
                interval=transport.min_edit_interval_s, priority=Priority.EDIT,
            )
        except MessageGone:
            log.info("discord.expired_card_gone channel=%s message=%s", channel_id, message_id)

    async def mark_interrupted(self, delivery: Delivery) -> None:
        """Append a note to the cut-off message in place; a deleted message needs nothing."""
        ctx = self._running()
        if delivery.message_id is None:
            return
        transport = ctx.transport(delivery.thread_id or delivery.chat_id)
        text = delivery.text.rstrip()[: DISCORD_LIMIT - len(INTERRUPTED_NOTE)]
        note = (text + INTERRUPTED_NOTE).strip()
        message_id = delivery.message_id
        try:
            await through_outbox(
                ctx.outbox, transport.chat_key, lambda: transport.edit(message_id, note, []),
                interval=transport.min_edit_interval_s, priority=Priority.EDIT,
            )
        except MessageGone:
            log.info("discord.interrupted_message_gone channel=%s message=%s", delivery.chat_id, message_id)


async def _followup(interaction: discord.Interaction, text: str) -> str | None:
    try:
        message = await interaction.followup.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS, wait=True)
    except discord.HTTPException as exc:
        log.warning("discord.followup_failed: %s", exc)
        return None
    return str(message.id)


async def _quietly(what: str, aw: Coroutine[Any, Any, Any]) -> None:
    try:
        await aw
    except Exception:  # closing must go on: later steps still release their resources
        log.exception("discord.close_step_failed step=%s", what)
