"""Inbound simulation for the fake Bot API: what users do, turned into real-shaped updates.

Each helper stores the user's message in the chat (so the bot can reply to it, and tests
can inspect it), builds the Update JSON Telegram would send, and delivers it: queued for
``getUpdates``, or POSTed to the webhook when one is set. Helpers return the update id
(``press_button`` returns the callback query id) and are safe to call from any thread.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.fakes.telegram_state import JSON
from tests.fakes.telegram_world import World


class InboundMixin:
    """Mixed into FakeTelegram, which provides the lock, the world and ``_deliver``."""

    _cond: threading.Condition
    _world: World

    def _deliver(self, update: JSON, *, forced: bool = False) -> None:
        raise NotImplementedError

    def add_chat(
        self,
        chat_id: int,
        *,
        type: str | None = None,
        title: str | None = None,
        username: str | None = None,
        first_name: str | None = None,
        is_forum: bool = False,
    ) -> None:
        """Make a chat known (sending to an unknown chat is "Bad Request: chat not found").

        ``type`` defaults from the id: positive → private, ``-100…`` → supergroup, else group.
        """
        with self._cond:
            self._world.add_chat(
                chat_id,
                type=type,
                title=title,
                username=username,
                first_name=first_name,
                is_forum=is_forum,
            )

    def send_private(
        self, user_id: int, text: str, first_name: str = "Alice", username: str | None = None
    ) -> int:
        """The user writes to the bot in their private chat (chat id == user id)."""
        with self._cond:
            chat = self._world.add_chat(
                user_id, type="private", first_name=first_name, username=username
            )
            user = self._world.user_json(user_id, first_name, username)
            update = self._world.inbound_message(chat, user, text)
            self._deliver(update)
            return int(update["update_id"])

    def send_group(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        title: str = "Test Group",
        first_name: str = "Bob",
        username: str | None = None,
        mention: bool = False,
        reply_to_bot_message_id: int | None = None,
        thread_id: int | None = None,
    ) -> int:
        """A user writes in a group (delivered to the bot only if privacy mode lets it
        through, see ``FakeTelegram.set_privacy_mode``). ``mention`` prepends "@<bot_username> " with a mention
        entity; ``thread_id`` makes the chat a forum and the message a topic message (and,
        as Telegram does, a reply to the topic's creation message unless it replies to
        ``reply_to_bot_message_id``)."""
        if chat_id > 0:
            raise ValueError("group chat ids are negative")
        with self._cond:
            chat = self._world.add_chat(chat_id, title=title, is_forum=thread_id is not None)
            user = self._world.user_json(user_id, first_name, username)
            prefix = f"@{self._world.bot_username} " if mention else ""
            extra = [self._world.mention_entity()] if mention else []
            update = self._world.inbound_message(
                chat,
                user,
                prefix + text,
                thread_id=thread_id,
                reply_to=reply_to_bot_message_id,
                extra_entities=extra,
            )
            if self._world.bot_sees(chat, update["message"]):
                self._deliver(update)  # else stored in the chat, never delivered (privacy mode)
            return int(update["update_id"])

    def send_media(
        self,
        chat_id: int,
        user_id: int,
        kind: str,
        data: bytes,
        *,
        caption: str = "",
        file_name: str | None = None,
        mime_type: str | None = None,
        media_group_id: str | None = None,
        mention: bool = False,
        first_name: str = "Alice",
        title: str = "Test Group",
        declared_size: int | None = None,
    ) -> int:
        """A user sends a photo, document, voice note or audio file (``kind``), with an
        optional caption; private chat when ``chat_id`` > 0, else a group (``mention``
        prepends "@<bot_username> " to the caption, as the way through privacy mode). The
        file is stored for getFile; ``declared_size`` overrides the size the update states
        (Telegram states the real one). Returns the update id."""
        if kind not in ("photo", "document", "voice", "audio"):
            raise ValueError(f"unknown media kind {kind!r}")
        with self._cond:
            if chat_id > 0:
                chat = self._world.add_chat(chat_id, type="private", first_name=first_name)
            else:
                chat = self._world.add_chat(chat_id, title=title)
            user = self._world.user_json(user_id, first_name, None)
            prefix = f"@{self._world.bot_username} " if mention else ""
            extra = [self._world.mention_entity()] if mention else []
            update = self._world.inbound_message(chat, user, prefix + caption, extra_entities=extra)
            message = update["message"]
            visible = self._world.bot_sees(chat, message)
            text = message.pop("text")
            entities = message.pop("entities", None)
            if text:
                message["caption"] = text
                if entities:
                    message["caption_entities"] = entities
            folder = {"photo": "photos", "voice": "voice", "audio": "music"}.get(kind, "documents")
            stored = self._world.add_file(data, file_name, mime_type, folder)
            size = len(data) if declared_size is None else declared_size
            ref = {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id, "file_size": size}
            if kind == "photo":
                message["photo"] = [
                    {**ref, "file_id": stored.file_id + "s", "file_unique_id": stored.file_unique_id + "s",
                     "width": 90, "height": 90, "file_size": min(size, 1000)},
                    {**ref, "width": 1280, "height": 960},
                ]
                self._world.files[stored.file_id + "s"] = stored  # the thumbnail: same bytes here
            elif kind == "document":
                message["document"] = {**ref, "file_name": file_name, "mime_type": mime_type}
            elif kind == "voice":
                message["voice"] = {**ref, "duration": 2, "mime_type": mime_type or "audio/ogg"}
            else:
                message["audio"] = {**ref, "duration": 2, "file_name": file_name, "mime_type": mime_type}
            if media_group_id is not None:
                message["media_group_id"] = media_group_id
            stored_msg = self._world.chats[chat.id].messages[message["message_id"]]
            stored_msg.raw = copy.deepcopy(message)
            self._world.delivered[update["update_id"]] = copy.deepcopy(update)
            if visible:
                self._deliver(update)
            return int(update["update_id"])

    def press_button(
        self,
        chat_id: int,
        message_id: int,
        user_id: int,
        data: str,
        *,
        first_name: str = "Alice",
        username: str | None = None,
        require_button: bool = True,
    ) -> str:
        """A user presses an inline button; returns the callback query id to be answered.

        With ``require_button`` (default) the message must currently show a button with
        that ``callback_data``; pass False to simulate a stale client or forged data.
        """
        with self._cond:
            if chat_id not in self._world.chats:
                raise ValueError(f"unknown chat {chat_id}")
            user = self._world.user_json(user_id, first_name, username)
            update = self._world.callback_query(
                self._world.chats[chat_id], message_id, user, data, require_button
            )
            self._deliver(update)
            return str(update["callback_query"]["id"])

    def push_update(self, raw: JSON) -> Any:
        """Deliver ``raw`` as-is (for malformed or unusual updates); assigns an update_id if
        missing. Returns the update_id. Non-integer ids bypass offset confirmation."""
        with self._cond:
            update = copy.deepcopy(raw)
            if "update_id" not in update:
                update["update_id"] = self._world.next_update_id()
            uid = update["update_id"]
            if isinstance(uid, int):
                self._world.delivered[uid] = copy.deepcopy(update)
            self._deliver(update, forced=not isinstance(uid, int))
            return uid

    def redeliver(self, update_id: int) -> None:
        """Deliver an earlier update again, same update_id (as after a lost confirmation).

        In polling mode it is returned by the next getUpdates, alone and regardless of the
        offset; in webhook mode it is POSTed again.
        """
        with self._cond:
            if update_id not in self._world.delivered:
                raise ValueError(f"unknown update_id {update_id}")
            self._deliver(copy.deepcopy(self._world.delivered[update_id]), forced=True)
