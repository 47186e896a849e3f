"""Value types of the fake Bot API: errors, stored chats/messages/files, call and delivery records.

Stored objects are mutable and owned by the fake (guarded by its lock); everything handed
to a test is a deep copy, so a test can never race the server thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


class ApiError(Exception):
    """A Bot API error answer: ``{"ok": false, "error_code": status, "description": ...}``."""

    def __init__(self, status: int, description: str, parameters: JSON | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    @classmethod
    def bad_request(cls, detail: str) -> ApiError:
        return cls(400, f"Bad Request: {detail}")

    def payload(self) -> JSON:
        body: JSON = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return body


@dataclass(frozen=True, slots=True)
class FileUpload:
    """One multipart file part as received."""

    filename: str | None
    content_type: str | None
    data: bytes


@dataclass(slots=True)
class StoredFile:
    file_id: str
    file_unique_id: str
    file_name: str | None
    mime_type: str | None
    data: bytes
    file_path: str


@dataclass(frozen=True, slots=True)
class Edit:
    """The content a message had *before* one edit, and when the edit happened (monotonic)."""

    text: str | None
    entities: list[JSON]
    reply_markup: JSON | None
    at: float


@dataclass(slots=True)
class StoredMessage:
    """A message in a chat, from the bot or from a (simulated) user."""

    chat_id: int
    message_id: int
    date: int
    from_bot: bool
    user_id: int | None
    thread_id: int | None = None
    text: str | None = None
    entities: list[JSON] = field(default_factory=list)
    caption: str | None = None
    document: StoredFile | None = None
    photo: StoredFile | None = None
    voice: StoredFile | None = None
    reply_markup: JSON | None = None
    reply_to_message_id: int | None = None
    edits: list[Edit] = field(default_factory=list)
    edit_date: int | None = None
    deleted: bool = False
    raw: JSON | None = None  # for user messages: the Message JSON that was delivered


@dataclass(slots=True)
class Chat:
    id: int
    type: str  # "private" | "group" | "supergroup" | "channel"
    title: str | None = None
    username: str | None = None
    first_name: str | None = None
    is_forum: bool = False
    messages: dict[int, StoredMessage] = field(default_factory=dict)
    next_message_id: int = 1

    def to_json(self) -> JSON:
        data: JSON = {"id": self.id, "type": self.type}
        for key in ("title", "username", "first_name"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.is_forum:
            data["is_forum"] = True
        return data


@dataclass(slots=True)
class CallbackQueryState:
    id: str
    chat_id: int
    message_id: int
    user_id: int
    data: str
    answered: bool = False
    answer: JSON | None = None


@dataclass(slots=True)
class Call:
    """One Bot API request as the fake answered it.

    ``at`` is ``time.monotonic()`` when the request arrived, ``finished_at`` when it was
    answered; calls are appended on completion (a long poll appears when it returns).
    ``encoding`` is how parameters came: "json", "form", "multipart", "query" or "none".
    """

    method: str
    params: JSON
    at: float
    encoding: str
    finished_at: float = 0.0
    ok: bool = False
    status: int = 200
    result: Any = None
    description: str | None = None
    injected: bool = False  # failed by fail_next() or flood_limit(), not by validation
    dropped: bool = False  # applied, then the response was withheld (drop_response_next())

    @property
    def error_code(self) -> int | None:
        return None if self.ok else self.status


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One POST the fake made to the webhook: ``status`` None when the connection failed."""

    update_id: int | None
    url: str
    secret: str | None
    status: int | None
    at: float
    error: str | None = None


@dataclass(slots=True)
class FailureRule:
    method: str  # canonical method name or "*"
    status: int
    description: str
    parameters: JSON | None
    remaining: int
    chat_id: int | str | None


@dataclass(slots=True)
class DropRule:
    """Apply the next matching calls, then withhold their response (see drop_response_next)."""

    method: str
    how: str  # "reset": close the connection; "stall": answer nothing until the client gives up
    remaining: int
    chat_id: str | None
    apply: bool = True  # False: the connection drops before the request takes effect


@dataclass(slots=True)
class QueuedUpdate:
    update: JSON
    forced: bool = False  # redelivered: delivered once regardless of offset
