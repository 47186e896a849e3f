"""Telegram `Update` → platform-free `Inbound` (the only thing the router reads).

Contract of `to_inbound`: returns an `Inbound` for a text message, or a photo, document,
voice note or audio (its caption as the text), in a private chat, group or supergroup, and
None for everything else (edits, stickers and other media, channel posts,
service messages, member updates); it never raises for odd shapes — a message without a
sender, without a date, or with entities pointing outside the text is handled or skipped.

`mentioned` is True when the message is addressed to the bot: an @mention of its username,
a text_mention of its user, a /command for it (bare, or /cmd@its_username), or a reply to one
of its messages. In forum topics every message's `reply_to_message` is the topic's creation
message; that is not a reply to the bot and does not count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from telegram import Message, MessageEntity, Update

from adapters.telegram.media import attachments_of
from agent_core.inbound import ChatKind, Inbound
from agent_core.text import clean_text

log = logging.getLogger(__name__)

PLATFORM = "telegram"
_CHAT_KINDS: dict[str, ChatKind] = {"private": "private", "group": "group", "supergroup": "group"}


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is, from getMe (username compared case-insensitively)."""

    id: int
    username: str

    def is_me(self, username: str) -> bool:
        return username.lstrip("@").lower() == self.username.lower()


def to_inbound(update: Update, me: BotIdentity) -> Inbound | None:
    """See the module docstring."""
    message = update.message
    if message is None:
        return None
    kind = _CHAT_KINDS.get(message.chat.type)
    text = message.text or message.caption or ""
    attachments = attachments_of(message) if message.text is None else ()
    if kind is None or not (text or attachments):
        return None
    sender = message.from_user
    if sender is not None:
        if sender.id == me.id:
            return None  # our own message echoed back (never happens on Telegram, cheap to guard)
        sender_id, sender_name = str(sender.id), clean_text(sender.full_name) or str(sender.id)
    elif message.sender_chat is not None:  # an anonymous admin or a linked channel
        sender_id = str(message.sender_chat.id)
        sender_name = clean_text(message.sender_chat.title or message.sender_chat.effective_name or "") or sender_id
    else:
        return None
    thread_id = message.message_thread_id if message.is_topic_message else None
    return Inbound(
        platform=PLATFORM,
        chat_kind=kind,
        chat_id=str(message.chat.id),
        sender_id=sender_id,
        sender_name=sender_name,
        text=clean_text(text),  # a lone surrogate stored here would wedge every later request
        thread_id=None if thread_id is None else str(thread_id),
        mentioned=addressed_to_bot(message, me),
        message_id=str(message.message_id),
        update_id=str(update.update_id),
        attachments=attachments,
        album_id=message.media_group_id,
    )


def addressed_to_bot(message: Message, me: BotIdentity) -> bool:
    """See the module docstring (`mentioned`); a caption's entities count like a text's."""
    caption = message.text is None and message.caption is not None
    for entity in message.caption_entities if caption else message.entities:
        if entity.type == MessageEntity.TEXT_MENTION:
            if entity.user is not None and entity.user.id == me.id:
                return True
            continue
        if entity.type not in (MessageEntity.MENTION, MessageEntity.BOT_COMMAND):
            continue
        try:
            token = message.parse_caption_entity(entity) if caption else message.parse_entity(entity)
        except (IndexError, ValueError):  # an entity outside the text: ignore it
            continue
        if entity.type == MessageEntity.MENTION and me.is_me(token):
            return True
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            _, at, addressee = token.partition("@")
            if not at or me.is_me(addressee):
                return True
    return _replies_to_bot(message, me)


def _replies_to_bot(message: Message, me: BotIdentity) -> bool:
    replied = message.reply_to_message
    if replied is None or replied.from_user is None or replied.from_user.id != me.id:
        return False
    # In a forum every topic message "replies" to the topic's creation message.
    if replied.forum_topic_created is not None:
        return False
    return not (message.is_topic_message and replied.message_id == message.message_thread_id)


def describe(update: Update) -> str:
    """A short, secret-free description of an update for logs."""
    kinds = [
        name
        for name in ("message", "edited_message", "channel_post", "callback_query", "my_chat_member")
        if getattr(update, name, None) is not None
    ]
    chat = update.effective_chat
    return f"update={update.update_id} kind={'/'.join(kinds) or 'other'} chat={chat.id if chat else '-'}"
