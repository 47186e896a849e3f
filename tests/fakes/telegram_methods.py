"""Bot API method handlers of the fake: validate like Telegram, mutate the World, return ``result``.

Each handler takes ``(world, params)`` with params already coerced to documented types
and either returns the ``result`` of an ``{"ok": true}`` answer or raises
:class:`ApiError` carrying the real service's status and description. ``getUpdates`` is
not here: long polling needs the server's event loop (see ``telegram_api``).
"""

from __future__ import annotations

import copy
import io
import json
import secrets
import re
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.telegram_state import JSON, ApiError, Edit, FileUpload, StoredFile, StoredMessage
from tests.fakes.telegram_text import EntityError, parse_text, strip_text, utf16_len
from tests.fakes.telegram_world import UPDATE_TYPES, World

TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)
CHAT_ACTIONS = frozenset(
    (
        "typing upload_photo record_video upload_video record_voice upload_voice "
        "upload_document choose_sticker find_location record_video_note upload_video_note"
    ).split()
)
_BUTTON_ACTIONS = tuple(
    (
        "url callback_data web_app login_url switch_inline_query "
        "switch_inline_query_current_chat switch_inline_query_chosen_chat copy_text "
        "callback_game pay"
    ).split()
)
Handler = Callable[[World, JSON], Any]


def _formatted(
    p: JSON, text_key: str, entities_key: str, limit: int, too_long: str, required: bool
) -> tuple[str | None, list[JSON]]:
    raw = p.get(text_key)
    if raw is None or raw == "":
        if required:
            raise ApiError.bad_request("message text is empty")
        return None, []
    try:
        text, entities = parse_text(str(raw), p.get("parse_mode"), p.get(entities_key))
    except EntityError as exc:
        raise ApiError.bad_request(f"can't parse entities: {exc}") from exc
    except ValueError as exc:
        raise ApiError.bad_request(f"unsupported parse_mode {p.get('parse_mode')!r}") from exc
    text, entities = strip_text(text, entities)
    if not text:
        if required:
            raise ApiError.bad_request("message text is empty")
        return None, []
    if utf16_len(text) > limit:
        raise ApiError.bad_request(too_long)
    return text, entities


def _reply_markup(p: JSON) -> JSON | None:
    """Validate ``reply_markup``; returns the inline keyboard a message would carry (or None)."""
    markup = p.get("reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise ApiError.bad_request("can't parse reply keyboard markup JSON object")
    if "inline_keyboard" not in markup:
        if not any(k in markup for k in ("keyboard", "remove_keyboard", "force_reply")):
            raise ApiError.bad_request("can't parse reply keyboard markup JSON object")
        return None
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise ApiError.bad_request(
            'can\'t parse inline keyboard button: field "inline_keyboard" must be an Array of Arrays'
        )
    for button in (b for row in rows for b in row):
        if (
            not isinstance(button, dict)
            or not isinstance(button.get("text"), str)
            or not button["text"]
        ):
            raise ApiError.bad_request(
                'can\'t parse inline keyboard button: Field "text" must be of type String'
            )
        if not any(k in button for k in _BUTTON_ACTIONS):
            raise ApiError.bad_request(
                "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
            )
        data = button.get("callback_data")
        if "callback_data" in button and (
            not isinstance(data, str) or not 1 <= len(data.encode()) <= 64
        ):
            raise ApiError.bad_request("BUTTON_DATA_INVALID")
        if "url" in button and not re.match(r"^(https?|tg)://\S+$", str(button["url"])):
            raise ApiError.bad_request("BUTTON_URL_INVALID")
    rows = [row for row in rows if row]
    return {"inline_keyboard": copy.deepcopy(rows)} if rows else None


def _thread(world: World, p: JSON, chat_id: int) -> int | None:
    thread_id = p.get("message_thread_id")
    if thread_id is not None and not world.chats[chat_id].is_forum:
        raise ApiError.bad_request("message thread not found")
    return thread_id


def _reply_target(world: World, p: JSON, chat_id: int) -> int | None:
    reply = p.get("reply_parameters") or {}
    target = (
        reply.get("message_id", p.get("reply_to_message_id")) if isinstance(reply, dict) else None
    )
    if target is None:
        return None
    allow = reply.get("allow_sending_without_reply", p.get("allow_sending_without_reply", False))
    msg = world.chats[chat_id].messages.get(int(target))
    if msg is None or msg.deleted:
        if allow:
            return None
        raise ApiError.bad_request("message to be replied not found")
    return msg.message_id


def _target(world: World, p: JSON, missing: str) -> StoredMessage:
    if p.get("inline_message_id"):
        raise ApiError.bad_request("MESSAGE_ID_INVALID")  # inline messages are not modelled
    chat = world.chat(p.get("chat_id"))
    if p.get("message_id") is None:
        raise ApiError.bad_request("message identifier is not specified")
    msg = chat.messages.get(p["message_id"])
    if msg is None or msg.deleted:
        raise ApiError.bad_request(missing)
    return msg


def _record_edit(msg: StoredMessage) -> None:
    msg.edits.append(
        Edit(
            msg.text if msg.document is None else msg.caption,
            copy.deepcopy(msg.entities),
            copy.deepcopy(msg.reply_markup),
            time.monotonic(),
        )
    )
    msg.edit_date = int(time.time())


# ---- methods ------------------------------------------------------------------------------
def get_me(world: World, p: JSON) -> Any:
    return {
        **world.bot_user(),
        "can_join_groups": True,
        "can_read_all_group_messages": not world.privacy_mode,
        "supports_inline_queries": False,
        "can_connect_to_business": False,
        "has_main_web_app": False,
    }


def send_message(world: World, p: JSON) -> Any:
    chat = world.chat(p.get("chat_id"))
    text, entities = _formatted(p, "text", "entities", TEXT_LIMIT, "message is too long", True)
    markup = _reply_markup(p)
    thread_id, reply_to = _thread(world, p, chat.id), _reply_target(world, p, chat.id)
    msg = world.new_message(chat, from_bot=True, user_id=None, thread_id=thread_id)
    msg.text, msg.entities, msg.reply_markup, msg.reply_to_message_id = (
        text,
        entities,
        markup,
        reply_to,
    )
    return world.message_json(msg)


def send_document(world: World, p: JSON) -> Any:
    chat = world.chat(p.get("chat_id"))
    doc = p.get("document")
    if isinstance(doc, FileUpload):
        if not doc.data:
            raise ApiError.bad_request("file must be non-empty")
        stored = world.add_file(doc.data, doc.filename, doc.content_type)
    elif isinstance(doc, str) and doc in world.files:
        stored = world.files[doc]
    elif doc is None:
        raise ApiError.bad_request("there is no document in the request")
    else:
        raise ApiError.bad_request("wrong file identifier/HTTP URL specified")
    caption, entities = _formatted(
        p, "caption", "caption_entities", CAPTION_LIMIT, "message caption is too long", False
    )
    markup = _reply_markup(p)
    thread_id, reply_to = _thread(world, p, chat.id), _reply_target(world, p, chat.id)
    msg = world.new_message(chat, from_bot=True, user_id=None, thread_id=thread_id)
    msg.document, msg.caption, msg.entities, msg.reply_markup = stored, caption, entities, markup
    msg.reply_to_message_id = reply_to
    return world.message_json(msg)


PHOTO_LIMIT = 10 * 1024 * 1024


def _upload(world: World, p: JSON, field: str, folder: str) -> StoredFile:
    value = p.get(field)
    if isinstance(value, FileUpload):
        if not value.data:
            raise ApiError.bad_request("file must be non-empty")
        return world.add_file(value.data, value.filename, value.content_type, folder)
    if isinstance(value, str) and value in world.files:
        return world.files[value]
    if value is None:
        raise ApiError.bad_request(f"there is no {field} in the request")
    raise ApiError.bad_request("wrong file identifier/HTTP URL specified")


def _media_message(world: World, p: JSON, kind: str, stored: StoredFile) -> Any:
    chat = world.chat(p.get("chat_id"))
    caption, entities = _formatted(
        p, "caption", "caption_entities", CAPTION_LIMIT, "message caption is too long", False
    )
    thread_id, reply_to = _thread(world, p, chat.id), _reply_target(world, p, chat.id)
    msg = world.new_message(chat, from_bot=True, user_id=None, thread_id=thread_id)
    setattr(msg, kind, stored)
    msg.caption, msg.entities, msg.reply_markup = caption, entities, _reply_markup(p)
    msg.reply_to_message_id = reply_to
    return world.message_json(msg)


def send_photo(world: World, p: JSON) -> Any:
    """Like the Bot API: a real image of at most 10 MB, width + height ≤ 10000, ratio ≤ 20."""
    world.chat(p.get("chat_id"))
    stored = _upload(world, p, "photo", "photos")
    if len(stored.data) > PHOTO_LIMIT:
        raise ApiError.bad_request("PHOTO_SAVE_FILE_INVALID")
    try:
        from PIL import Image

        with Image.open(io.BytesIO(stored.data)) as img:
            width, height = img.size
    except Exception:
        raise ApiError.bad_request("IMAGE_PROCESS_FAILED") from None
    if width + height > 10_000 or max(width, height) > 20 * min(width, height):
        raise ApiError.bad_request("PHOTO_INVALID_DIMENSIONS")
    return _media_message(world, p, "photo", stored)


def send_voice(world: World, p: JSON) -> Any:
    """A voice message: OGG/Opus (Telegram shows anything else as a file; here, refused)."""
    world.chat(p.get("chat_id"))
    stored = _upload(world, p, "voice", "voice")
    if not stored.data.startswith(b"OggS"):
        raise ApiError.bad_request("VOICE_MESSAGES_FORBIDDEN or wrong type: the voice must be OGG/Opus")
    return _media_message(world, p, "voice", stored)


def edit_message_text(world: World, p: JSON) -> Any:
    msg = _target(world, p, "message to edit not found")
    text, entities = _formatted(p, "text", "entities", TEXT_LIMIT, "message is too long", True)
    markup = _reply_markup(p)  # absent reply_markup removes the inline keyboard, as in Telegram
    if not msg.from_bot:
        raise ApiError.bad_request("message can't be edited")
    if msg.text is None:
        raise ApiError.bad_request("there is no text in the message to edit")
    if (msg.text, msg.entities, msg.reply_markup) == (text, entities, markup):
        raise ApiError.bad_request(NOT_MODIFIED)
    _record_edit(msg)
    msg.text, msg.entities, msg.reply_markup = text, entities, markup
    return world.message_json(msg)


def edit_message_reply_markup(world: World, p: JSON) -> Any:
    msg = _target(world, p, "message to edit not found")
    markup = _reply_markup(p)
    if not msg.from_bot:
        raise ApiError.bad_request("message can't be edited")
    if msg.reply_markup == markup:
        raise ApiError.bad_request(NOT_MODIFIED)
    _record_edit(msg)
    msg.reply_markup = markup
    return world.message_json(msg)


def delete_message(world: World, p: JSON) -> Any:
    msg = _target(world, p, "message to delete not found")
    if not msg.from_bot and world.chats[msg.chat_id].type != "private":
        raise ApiError.bad_request("message can't be deleted for everyone")
    msg.deleted = True
    return True


def send_chat_action(world: World, p: JSON) -> Any:
    chat = world.chat(p.get("chat_id"))
    if p.get("action") not in CHAT_ACTIONS:
        raise ApiError.bad_request("wrong parameter action in request")
    _thread(world, p, chat.id)
    return True


def answer_callback_query(world: World, p: JSON) -> Any:
    query = world.queries.get(str(p.get("callback_query_id", "")))
    if query is None or query.answered:
        raise ApiError.bad_request(
            "query is too old and response timeout expired or query ID is invalid"
        )
    query.answered = True
    query.answer = {k: p[k] for k in ("text", "show_alert", "url", "cache_time") if k in p}
    return True


def get_chat(world: World, p: JSON) -> Any:
    chat = world.chat(p.get("chat_id"))
    return {
        **chat.to_json(),
        "accent_color_id": 0,
        "max_reaction_count": 11,
        "accepted_gift_types": {
            "unlimited_gifts": False,
            "limited_gifts": False,
            "unique_gifts": False,
            "premium_subscription": False,
            "gifts_from_channels": False,
        },
    }


def get_chat_member(world: World, p: JSON) -> Any:
    chat = world.chat(p.get("chat_id"))
    user_id = p.get("user_id")
    if not isinstance(user_id, int) or user_id <= 0:
        raise ApiError.bad_request("invalid user_id specified")
    return world.chat_member(chat, user_id)


BOT_DOWNLOAD_LIMIT = 20 * 1024 * 1024


def get_file(world: World, p: JSON) -> Any:
    """Like the Bot API: bots may download files up to 20 MB; each call issues a fresh
    file_path, valid for `world.file_path_ttl` seconds."""
    stored = world.files.get(str(p.get("file_id", "")))
    if stored is None:
        raise ApiError.bad_request("invalid file_id")
    if len(stored.data) > BOT_DOWNLOAD_LIMIT:
        raise ApiError.bad_request("file is too big")
    path = f"{stored.file_path.rsplit('/', 1)[0]}/{secrets.token_hex(6)}_{stored.file_path.rsplit('/', 1)[1]}"
    world.file_paths[path] = (stored.file_id, world.file_clock() + world.file_path_ttl)
    return {
        "file_id": stored.file_id,
        "file_unique_id": stored.file_unique_id,
        "file_size": len(stored.data),
        "file_path": path,
    }


def _commands_key(p: JSON) -> tuple[str, str]:
    scope = p.get("scope") or {"type": "default"}
    if not isinstance(scope, dict) or "type" not in scope:
        raise ApiError.bad_request("can't parse BotCommandScope JSON object")
    return json.dumps(scope, sort_keys=True), str(p.get("language_code") or "")


def set_my_commands(world: World, p: JSON) -> Any:
    commands = p.get("commands")
    if not isinstance(commands, list):
        raise ApiError.bad_request("can't parse commands JSON object")
    if len(commands) > 100:
        raise ApiError.bad_request("BOT_COMMANDS_TOO_MUCH")
    for cmd in commands:
        if not isinstance(cmd, dict) or not re.fullmatch(
            r"[a-z0-9_]{1,32}", str(cmd.get("command", ""))
        ):
            raise ApiError.bad_request("BOT_COMMAND_INVALID")
        if not 1 <= len(str(cmd.get("description", "")).strip()) <= 256:
            raise ApiError.bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
    world.commands[_commands_key(p)] = [
        {"command": c["command"], "description": c["description"]} for c in commands
    ]
    return True


def get_my_commands(world: World, p: JSON) -> Any:
    return copy.deepcopy(world.commands.get(_commands_key(p), []))


def delete_my_commands(world: World, p: JSON) -> Any:
    world.commands.pop(_commands_key(p), None)
    return True


def set_webhook(world: World, p: JSON) -> Any:
    url = str(p.get("url") or "")
    if url and not re.match(r"^https?://[^\s/]+", url):
        raise ApiError.bad_request("bad webhook: An HTTPS URL must be provided for webhook")
    secret = p.get("secret_token")
    if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(secret)):
        raise ApiError.bad_request("bad webhook: secret token contains unallowed characters")
    allowed = p.get("allowed_updates")
    if allowed is not None and (
        not isinstance(allowed, list) or not all(a in UPDATE_TYPES for a in allowed)
    ):
        raise ApiError.bad_request("can't parse allowed_updates JSON object")
    if p.get("drop_pending_updates"):
        world.pending.clear()
    world.webhook.url, world.webhook.secret_token = url, (str(secret) if secret else None)
    world.webhook.allowed_updates = list(allowed or [])
    world.webhook.max_connections = int(p.get("max_connections") or 40)
    if allowed is not None:
        world.allowed_updates = list(allowed)
    return True


def delete_webhook(world: World, p: JSON) -> Any:
    if p.get("drop_pending_updates"):
        world.pending.clear()
    world.webhook.url, world.webhook.secret_token = "", None
    return True


def get_webhook_info(world: World, p: JSON) -> Any:
    hook = world.webhook
    info: JSON = {
        "url": hook.url,
        "has_custom_certificate": False,
        "pending_update_count": len(world.pending),
    }
    if hook.url:
        info["max_connections"] = hook.max_connections
        if hook.allowed_updates:
            info["allowed_updates"] = list(hook.allowed_updates)
        if hook.last_error_date is not None:
            info["last_error_date"], info["last_error_message"] = (
                hook.last_error_date,
                hook.last_error_message,
            )
    return info


METHODS: dict[str, Handler] = {
    "getMe": get_me,
    "sendMessage": send_message,
    "sendDocument": send_document,
    "sendPhoto": send_photo,
    "sendVoice": send_voice,
    "editMessageText": edit_message_text,
    "editMessageReplyMarkup": edit_message_reply_markup,
    "deleteMessage": delete_message,
    "sendChatAction": send_chat_action,
    "answerCallbackQuery": answer_callback_query,
    "getChat": get_chat,
    "getChatMember": get_chat_member,
    "getFile": get_file,
    "setMyCommands": set_my_commands,
    "getMyCommands": get_my_commands,
    "deleteMyCommands": delete_my_commands,
    "setWebhook": set_webhook,
    "deleteWebhook": delete_webhook,
    "getWebhookInfo": get_webhook_info,
}
# Calls that create or change a message: what flood_limit() paces per chat.
MESSAGE_CHANGING = frozenset(
    {"sendMessage", "sendDocument", "sendPhoto", "sendVoice", "editMessageText", "editMessageReplyMarkup"}
)
