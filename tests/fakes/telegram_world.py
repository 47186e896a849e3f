"""State of the fake Telegram: chats, messages, files, callback queries, commands, pending updates.

Not thread-safe on its own: :class:`tests.fakes.telegram_api.FakeTelegram` holds its lock
around every call. Inbound helpers build Update JSON shaped like what Telegram delivers
(user, chat, date, entities for commands/mentions, forum-topic fields, reply_to_message).
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.telegram_state import (
    JSON,
    ApiError,
    CallbackQueryState,
    Chat,
    QueuedUpdate,
    StoredFile,
    StoredMessage,
)
from tests.fakes.telegram_text import detect_entities, utf16_len

UPDATE_TYPES = tuple(
    (
        "message edited_message channel_post edited_channel_post business_connection "
        "business_message edited_business_message deleted_business_messages message_reaction "
        "message_reaction_count inline_query chosen_inline_result callback_query "
        "shipping_query pre_checkout_query purchased_paid_media poll poll_answer "
        "my_chat_member chat_member chat_join_request chat_boost removed_chat_boost"
    ).split()
)
# Delivered when allowed_updates is empty/unset (the Bot API's default).
DEFAULT_ALLOWED = frozenset(UPDATE_TYPES) - {
    "chat_member",
    "message_reaction",
    "message_reaction_count",
}


@dataclass(slots=True)
class Webhook:
    url: str = ""
    secret_token: str | None = None
    allowed_updates: list[str] = field(default_factory=list)
    max_connections: int = 40
    last_error_date: int | None = None
    last_error_message: str | None = None


class World:
    """The fake's mutable state plus the rules shared by method handlers and inbound helpers."""

    def __init__(
        self,
        *,
        token: str,
        bot_username: str,
        bot_name: str,
        first_update_id: int,
        auto_create_chats: bool,
        privacy_mode: bool = True,
    ) -> None:
        self.token = token
        self.privacy_mode = privacy_mode
        """Telegram's default: group messages reach the bot only when addressed to it."""
        self.bot_id = int(token.split(":", 1)[0])
        self.bot_username = bot_username
        self.bot_name = bot_name
        self.auto_create_chats = auto_create_chats
        self.chats: dict[int, Chat] = {}
        self.files: dict[str, StoredFile] = {}
        self.file_paths: dict[str, tuple[str, float]] = {}
        """file_path → (file_id, valid until, monotonic): getFile issues a path per call,
        downloadable for `file_path_ttl` seconds (an hour on Telegram)."""
        self.downloads: list[str] = []
        """Every file path a client asked to download, in order."""
        self.file_path_ttl = 3600.0
        self.file_clock = time.monotonic
        self.queries: dict[str, CallbackQueryState] = {}
        self.commands: dict[tuple[str, str], list[JSON]] = {}
        self.webhook = Webhook()
        self.users: dict[int, JSON] = {}  # everyone who ever wrote, for getChatMember
        self.members: dict[int, set[int]] = {}  # chat id -> user ids that wrote there
        self.admins: dict[int, dict[int, str]] = {}  # chat id -> user id -> creator/administrator
        self.allowed_updates: list[str] = []
        self.pending: list[QueuedUpdate] = []
        self.delivered: dict[int, JSON] = {}  # every update ever created, by update_id
        self._update_ids = itertools.count(first_update_id)
        self._file_ids = itertools.count(1)
        self._query_ids = itertools.count(4_300_000_000_000_000_001)

    # ---- identities -------------------------------------------------------------------
    def bot_user(self) -> JSON:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_name,
            "username": self.bot_username,
        }

    @staticmethod
    def user_json(user_id: int, first_name: str, username: str | None) -> JSON:
        user: JSON = {
            "id": user_id,
            "is_bot": False,
            "first_name": first_name,
            "language_code": "en",
        }
        if username:
            user["username"] = username
        return user

    # ---- chats and messages -----------------------------------------------------------
    def add_chat(
        self,
        chat_id: int,
        *,
        type: str | None = None,
        title: str | None = None,
        username: str | None = None,
        first_name: str | None = None,
        is_forum: bool = False,
    ) -> Chat:
        chat = self.chats.get(chat_id)
        if chat is None:
            kind = type or (
                "private"
                if chat_id > 0
                else "supergroup"
                if str(chat_id).startswith("-100") or is_forum
                else "group"
            )
            chat = Chat(chat_id, kind, title=title, username=username, first_name=first_name)
            self.chats[chat_id] = chat
        if is_forum:
            chat.is_forum, chat.type = True, "supergroup"
        for key, value in (("title", title), ("username", username), ("first_name", first_name)):
            if value is not None:
                setattr(chat, key, value)
        return chat

    def chat(self, chat_id: Any) -> Chat:
        """The chat named by a ``chat_id`` parameter, or "Bad Request: chat not found"."""
        if isinstance(chat_id, str) and chat_id.startswith("@"):
            for chat in self.chats.values():
                if chat.username and chat.username.lower() == chat_id[1:].lower():
                    return chat
            raise ApiError.bad_request("chat not found")
        if not isinstance(chat_id, int):
            raise ApiError.bad_request(
                "chat_id is empty" if chat_id in (None, "") else "chat not found"
            )
        if chat_id not in self.chats:
            if not self.auto_create_chats:
                raise ApiError.bad_request("chat not found")
            self.add_chat(chat_id)
        return self.chats[chat_id]

    def new_message(
        self, chat: Chat, *, from_bot: bool, user_id: int | None, thread_id: int | None
    ) -> StoredMessage:
        msg = StoredMessage(
            chat.id, chat.next_message_id, int(time.time()), from_bot, user_id, thread_id
        )
        chat.next_message_id += 1
        chat.messages[msg.message_id] = msg
        return msg

    def message_json(self, msg: StoredMessage, *, with_reply: bool = True) -> JSON:
        """The Message object for a stored message, as the Bot API returns it now."""
        if msg.raw is not None and not msg.from_bot:
            return copy.deepcopy(msg.raw)
        chat = self.chats[msg.chat_id]
        data: JSON = {
            "message_id": msg.message_id,
            "from": self.bot_user(),
            "chat": chat.to_json(),
            "date": msg.date,
        }
        if msg.thread_id is not None:
            data["message_thread_id"] = msg.thread_id
            if chat.is_forum:
                data["is_topic_message"] = True
        if msg.edit_date is not None:
            data["edit_date"] = msg.edit_date
        if msg.text is not None:
            data["text"] = msg.text
            if msg.entities:
                data["entities"] = copy.deepcopy(msg.entities)
        if msg.document is not None:
            doc = msg.document
            data["document"] = {
                "file_id": doc.file_id,
                "file_unique_id": doc.file_unique_id,
                "file_size": len(doc.data),
            }
            if doc.file_name:
                data["document"]["file_name"] = doc.file_name
            if doc.mime_type:
                data["document"]["mime_type"] = doc.mime_type
        if msg.photo is not None:
            ph = msg.photo
            data["photo"] = [{"file_id": ph.file_id, "file_unique_id": ph.file_unique_id,
                              "file_size": len(ph.data), "width": 1, "height": 1}]
        if msg.voice is not None:
            v = msg.voice
            data["voice"] = {"file_id": v.file_id, "file_unique_id": v.file_unique_id,
                             "file_size": len(v.data), "duration": 1, "mime_type": "audio/ogg"}
        if msg.caption is not None:
            data["caption"] = msg.caption
            if msg.entities:
                data["caption_entities"] = copy.deepcopy(msg.entities)
        if msg.reply_markup is not None:
            data["reply_markup"] = copy.deepcopy(msg.reply_markup)
        target = chat.messages.get(msg.reply_to_message_id or 0)
        if with_reply and target is not None and not target.deleted:
            data["reply_to_message"] = self.message_json(target, with_reply=False)
        return data

    def add_file(
        self, data: bytes, file_name: str | None, mime_type: str | None, folder: str = "documents"
    ) -> StoredFile:
        n = next(self._file_ids)
        suffix = f".{file_name.rsplit('.', 1)[1]}" if file_name and "." in file_name else ""
        stored = StoredFile(
            f"BQACAgIAAxkBAAI{n:06d}",
            f"AgAD{n:06d}",
            file_name,
            mime_type,
            data,
            f"{folder}/file_{n}{suffix}",
        )
        self.files[stored.file_id] = stored
        return stored

    # ---- updates ----------------------------------------------------------------------
    def next_update_id(self) -> int:
        return next(self._update_ids)

    def new_update(self, kind: str, payload: JSON) -> JSON:
        uid = self.next_update_id()
        update: JSON = {"update_id": uid, kind: payload}
        self.delivered[uid] = update
        return update

    def take_updates(self, offset: int | None, limit: int, allowed: list[str] | None) -> list[JSON]:
        """getUpdates semantics: confirm ids below ``offset``, drop disallowed types, return a batch."""
        if allowed is not None:
            self.allowed_updates = list(allowed)
        if offset is not None and offset < 0:
            self.pending = self.pending[offset:]
        elif offset is not None:
            self.pending = [q for q in self.pending if q.update["update_id"] >= offset or q.forced]
        kinds = set(self.allowed_updates) or DEFAULT_ALLOWED
        self.pending = [
            q
            for q in self.pending
            if _update_kind(q.update) in kinds or _update_kind(q.update) not in UPDATE_TYPES
        ]
        forced = next((q for q in self.pending if q.forced), None)
        if forced is not None:  # a redelivered update goes out alone, once, ignoring the offset
            self.pending.remove(forced)
            return [copy.deepcopy(forced.update)]
        return [copy.deepcopy(q.update) for q in self.pending[: max(1, min(limit, 100))]]

    # ---- inbound simulation -----------------------------------------------------------
    def inbound_message(
        self,
        chat: Chat,
        user: JSON,
        text: str,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
        extra_entities: Iterable[JSON] = (),
    ) -> JSON:
        msg = self.new_message(chat, from_bot=False, user_id=user["id"], thread_id=thread_id)
        msg.text, msg.reply_to_message_id = text, reply_to
        self.users[user["id"]] = user
        self.members.setdefault(chat.id, set()).add(user["id"])
        entities = sorted([*extra_entities, *detect_entities(text)], key=lambda e: e["offset"])
        entities = [
            e
            for k, e in enumerate(entities)
            if k == 0 or e["offset"] >= entities[k - 1]["offset"] + entities[k - 1]["length"]
        ]
        msg.entities = entities
        data: JSON = {
            "message_id": msg.message_id,
            "from": user,
            "chat": chat.to_json(),
            "date": msg.date,
            "text": text,
        }
        if entities:
            data["entities"] = entities
        if thread_id is not None:
            data["message_thread_id"] = thread_id
            if chat.is_forum:
                data["is_topic_message"] = True
        if reply_to is not None:
            target = chat.messages.get(reply_to)
            if target is None:
                raise ValueError(f"no message {reply_to} in chat {chat.id} to reply to")
            data["reply_to_message"] = self.message_json(target, with_reply=False)
        elif thread_id is not None and chat.is_forum:
            # Telegram marks every topic message as a reply to the topic's creation message.
            data["reply_to_message"] = {
                "message_id": thread_id,
                "from": user,
                "chat": chat.to_json(),
                "date": msg.date,
                "message_thread_id": thread_id,
                "is_topic_message": True,
                "forum_topic_created": {"name": f"Topic {thread_id}", "icon_color": 7322096},
            }
        msg.raw = data
        return self.new_update("message", data)

    def chat_member(self, chat: Chat, user_id: int) -> JSON:
        """A ChatMember as getChatMember answers it: creator / administrator as set by
        ``FakeTelegram.set_chat_admin``, member if they ever wrote there, else left."""
        if user_id == self.bot_id:
            user = self.bot_user()
        elif user_id in self.users:
            user = self.users[user_id]
        else:
            raise ApiError.bad_request("user not found")
        status = self.admins.get(chat.id, {}).get(user_id)
        if chat.type == "private":
            status = "member" if user_id in (chat.id, self.bot_id) else None
            if status is None:
                raise ApiError.bad_request("user not found")
        if status == "creator":
            return {"status": "creator", "user": user, "is_anonymous": False}
        if status == "administrator":
            rights = (
                "can_manage_chat can_delete_messages can_manage_video_chats can_restrict_members "
                "can_change_info can_invite_users can_post_stories can_edit_stories "
                "can_delete_stories can_pin_messages"
            ).split()
            return {
                "status": "administrator",
                "user": user,
                "can_be_edited": False,
                "is_anonymous": False,
                "can_promote_members": False,
                **dict.fromkeys(rights, True),
                **({"can_manage_topics": True} if chat.is_forum else {}),
            }
        if user_id == self.bot_id or user_id in self.members.get(chat.id, set()) or chat.type == "private":
            return {"status": "member", "user": user}
        return {"status": "left", "user": user}

    def mention_entity(self) -> JSON:
        return {"type": "mention", "offset": 0, "length": utf16_len(f"@{self.bot_username}")}

    def callback_query(
        self, chat: Chat, message_id: int, user: JSON, data: str, require_button: bool
    ) -> JSON:
        msg = chat.messages.get(message_id)
        if msg is None or msg.deleted:
            raise ValueError(f"no visible message {message_id} in chat {chat.id}")
        buttons = [b for row in (msg.reply_markup or {}).get("inline_keyboard", []) for b in row]
        if require_button and not any(b.get("callback_data") == data for b in buttons):
            raise ValueError(f"message {message_id} has no button with callback_data {data!r}")
        query_id = str(next(self._query_ids))
        self.queries[query_id] = CallbackQueryState(query_id, chat.id, message_id, user["id"], data)
        payload = {
            "id": query_id,
            "from": user,
            "message": self.message_json(msg),
            "chat_instance": str(-abs(chat.id) * 7919),
            "data": data,
        }
        return self.new_update("callback_query", payload)


    def bot_sees(self, chat: Chat, message: JSON) -> bool:
        """Whether Telegram delivers this group message to the bot under privacy mode:
        a mention of the bot, a reply to one of its messages, or a command (bare, or
        /cmd@this_bot; a bare one reaches us as the only bot in the fake's groups)."""
        if not self.privacy_mode or chat.type == "private":
            return True
        text = message.get("text") or ""
        for e in message.get("entities", []):
            token = _utf16_slice(text, e["offset"], e["length"])
            if e["type"] == "mention" and token[1:].lower() == self.bot_username.lower():
                return True
            if e["type"] == "text_mention" and e.get("user", {}).get("id") == self.bot_id:
                return True
            if e["type"] == "bot_command" and e["offset"] == 0:
                _, at, addressee = token.partition("@")
                if not at or addressee.lower() == self.bot_username.lower():
                    return True
        replied = message.get("reply_to_message") or {}
        return (replied.get("from") or {}).get("id") == self.bot_id and "forum_topic_created" not in replied


def _utf16_slice(text: str, offset: int, length: int) -> str:
    raw = text.encode("utf-16-le")
    return raw[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def _update_kind(update: JSON) -> str:
    return next((k for k in update if k != "update_id"), "")
