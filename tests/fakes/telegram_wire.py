"""Request decoding for the fake Bot API: the four ways a client may send parameters.

python-telegram-bot 22 sends ``application/x-www-form-urlencoded`` where string values are
raw and every other value is ``json.dumps``-ed (ints as "42", bools as "true", lists and
dicts as JSON), and ``multipart/form-data`` with the same fields plus file parts when a
file is uploaded. Other clients send a JSON body or a query string. Whatever the encoding,
:func:`coerce` turns values into the types the Bot API documents, keyed by parameter name.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.telegram_state import JSON, ApiError, FileUpload

_FLOAT = frozenset({"timeout"})
_INT = frozenset(
    (
        "message_id offset limit message_thread_id max_connections cache_time "
        "reply_to_message_id user_id from_chat_id"
    ).split()
)
_BOOL = frozenset(
    (
        "drop_pending_updates disable_notification protect_content show_alert "
        "disable_web_page_preview allow_sending_without_reply disable_content_type_detection "
        "show_caption_above_media allow_paid_broadcast"
    ).split()
)
_JSON = frozenset(
    (
        "entities caption_entities reply_markup allowed_updates commands scope "
        "reply_parameters link_preview_options message_ids"
    ).split()
)
_CHAT_ID = frozenset({"chat_id"})


async def read_params(request: web.Request) -> tuple[JSON, str]:
    """Decode a request's parameters (query string merged under the body).

    Returns ``(params, encoding)`` with encoding "json", "form", "multipart", "query" or
    "none" (PTB posts parameterless methods such as getMe with an empty body).
    """
    params: JSON = dict(request.query)
    encoding = "query" if params else "none"
    ctype = request.content_type
    if request.method == "POST" and request.can_read_body:
        if ctype == "application/json":
            try:
                body = await request.json()
            except ValueError as exc:
                raise ApiError.bad_request("can't parse JSON body") from exc
            if not isinstance(body, dict):
                raise ApiError.bad_request("JSON body must be an object")
            params.update(body)
            encoding = "json"
        elif ctype == "multipart/form-data":
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader) or part.name is None:
                    continue
                if part.filename is not None:
                    data = await part.read()
                    params[part.name] = FileUpload(
                        part.filename, part.headers.get("Content-Type"), bytes(data)
                    )
                else:
                    params[part.name] = await part.text()
            encoding = "multipart"
        else:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
            encoding = "form"
    return coerce(params, typed=(encoding == "json")), encoding


def coerce(params: JSON, *, typed: bool) -> JSON:
    """Convert each value to its documented type; ``typed`` means values came as JSON."""
    return {name: _coerce_one(name, value, typed) for name, value in params.items()}


def _coerce_one(name: str, value: Any, typed: bool) -> Any:
    if isinstance(value, FileUpload):
        return value
    try:
        if name in _INT:
            if isinstance(value, bool):
                raise ValueError
            return int(value)
        if name in _FLOAT:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if name in _BOOL:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1"):
                return True
            if str(value).lower() in ("false", "0", ""):
                return False
            raise ValueError
        if name in _JSON:
            return json.loads(value) if isinstance(value, str) else value
        if name in _CHAT_ID:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            text = str(value)
            return int(text) if text.lstrip("-").isdigit() else text
    except (ValueError, TypeError) as exc:
        if name in _JSON:
            raise ApiError.bad_request(f"can't parse {name} JSON object") from exc
        raise ApiError.bad_request(f"invalid {name} specified") from exc
    if typed or not isinstance(value, str):
        return (
            value if not isinstance(value, (int, float)) or isinstance(value, bool) else str(value)
        )
    return value
