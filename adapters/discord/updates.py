"""discord.py `Message` → platform-free `Inbound` (the only thing the router reads).

Contract of `to_inbound`: an `Inbound` for a user's message with text or attachments (files,
images, voice messages: `attachments_of`) in a DM, a guild text channel or a thread; None
for the bot's own and other bots' messages, system messages and messages with neither
(e.g. guild messages whose content Discord withholds because the Message Content intent is
off). A thread is its parent channel's sub-session of its own:
`chat_id` is the parent, `thread_id` the thread, `space_id` the guild (None in a DM).
`mentioned` is True for a mention of the
bot's user or a reply to one of the bot's messages; the bot's own mention in the text
reads `@<bot name>` (the model never sees raw ids of the bot).
"""

from __future__ import annotations

from dataclasses import dataclass

import discord

from agent_core.inbound import Attachment, Inbound
from agent_core.text import clean_text

PLATFORM = "discord"
_TEXT_TYPES = (discord.MessageType.default, discord.MessageType.reply)


@dataclass(frozen=True, slots=True)
class BotIdentity:
    id: int
    name: str


def where(channel: object) -> tuple[str, str | None]:
    """(chat_id, thread_id) of a channel: a thread belongs to its parent channel."""
    if isinstance(channel, discord.Thread):
        return str(channel.parent_id), str(channel.id)
    return str(getattr(channel, "id", "")), None


def to_inbound(message: discord.Message, me: BotIdentity) -> Inbound | None:
    """See the module docstring."""
    if message.author.bot or message.type not in _TEXT_TYPES:
        return None
    text = message.content or ""
    attachments = attachments_of(message)
    if not text.strip() and not attachments:
        return None
    private = message.guild is None
    chat_id, thread_id = where(message.channel)
    for raw in (f"<@{me.id}>", f"<@!{me.id}>"):
        text = text.replace(raw, f"@{me.name}")
    return Inbound(
        platform=PLATFORM,
        chat_kind="private" if private else "group",
        chat_id=chat_id,
        sender_id=str(message.author.id),
        sender_name=clean_text(message.author.display_name) or str(message.author.id),
        text=clean_text(text),  # a lone surrogate stored here would wedge every later request
        thread_id=thread_id,
        mentioned=private or addressed_to_bot(message, me),
        message_id=str(message.id),
        update_id=str(message.id),
        space_id=None if message.guild is None else str(message.guild.id),
        attachments=attachments,
    )


def attachments_of(message: discord.Message) -> tuple[Attachment, ...]:
    """A message's files as attachment refs (their URL fetches them; several are one turn)."""
    out: list[Attachment] = []
    for a in message.attachments:
        mime = (a.content_type or "").split(";")[0].strip()
        if a.is_voice_message():
            kind = "voice"
        elif mime.startswith("image/"):
            kind = "photo"
        elif mime.startswith("audio/"):
            kind = "audio"
        else:
            kind = "document"
        out.append(Attachment(kind, a.url, a.filename, mime, a.size))  # type: ignore[arg-type]
    return tuple(out)


def addressed_to_bot(message: discord.Message, me: BotIdentity) -> bool:
    if any(user.id == me.id for user in message.mentions):
        return True
    ref = message.reference
    resolved = ref.resolved if ref is not None else None
    return isinstance(resolved, discord.Message) and resolved.author.id == me.id


def command_inbound(interaction: discord.Interaction, text: str) -> Inbound:
    """A slash command as the text command it mirrors ("/model opus"); its reply target
    carries the interaction (`message_id` "i<id>"), so the answer goes back ephemerally."""
    chat_id, thread_id = where(interaction.channel)
    user = interaction.user
    return Inbound(
        platform=PLATFORM,
        chat_kind="private" if interaction.guild_id is None else "group",
        chat_id=chat_id or str(interaction.channel_id),
        sender_id=str(user.id),
        sender_name=clean_text(user.display_name) or str(user.id),
        text=clean_text(text),
        thread_id=thread_id,
        mentioned=True,  # a slash command is addressed to this bot by construction
        message_id=f"i{interaction.id}",
        update_id=str(interaction.id),
        space_id=None if interaction.guild_id is None else str(interaction.guild_id),
    )
