"""The REST half of the fake Discord (tests/fakes/discord_api.py): routing, Discord's limits
and error bodies, rate limits and lost answers. A mixin of `FakeDiscord`, which owns the
state it reads (see that module's docstring for what is enforced)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.fakes.discord_state import Call, Channel, Interaction, State, StoredMessage, snowflake

MAX_CONTENT = 2000
EPHEMERAL = 64


@dataclass
class _Failure:
    method: str
    path_prefix: str
    status: int
    code: int
    message: str
    remaining: int
    skip: int = 0
    """Matching calls let through before the refusals start."""


@dataclass
class _RateLimit:
    method: str
    path_prefix: str
    retry_after: float


class DiscordError(Exception):
    def __init__(self, status: int, code: int, message: str, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.errors = status, code, errors


def _form_error(field_name: str, message: str) -> DiscordError:
    errors = {field_name: {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": message}]}}
    return DiscordError(400, 50035, "Invalid Form Body", errors)


class DiscordRest:
    """REST routes of `FakeDiscord` (mixed in: the attributes below are its)."""

    if TYPE_CHECKING:
        token: str
        application_id: str
        bot_id: str
        interaction_deadline_s: float
        state: State
        _rate_limits: list[_RateLimit]
        _lose: list[tuple[str, str]]
        _failures: list[_Failure]
        _history_open: threading.Event
        history_waiting: int

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"]
        body = await _body(request)
        if request.method == "GET" and path.endswith("/messages") and not self._history_open.is_set():
            with self.state.cond:
                self.history_waiting += 1
            self.state.changed()
            await asyncio.to_thread(self._history_open.wait, 30)
        open_route = path.startswith(("/interactions/", "/webhooks/"))
        authorized = request.headers.get("Authorization") == f"Bot {self.token}"
        status, headers, payload = 200, {}, None
        try:
            if not open_route and not authorized:
                raise DiscordError(401, 0, "401: Unauthorized")
            self._check_mentions(request.method, path, body)
            failure = self._take_failure(request.method, path)
            if failure is not None:  # refused before anything took effect
                raise DiscordError(failure.status, failure.code, f"{failure.status}: {failure.message}")
            limit = self._take_rate_limit(request.method, path)
            if limit is not None:
                status = 429
                headers = {
                    "Retry-After": str(max(1, int(limit.retry_after + 0.999))),
                    "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset-After": f"{limit.retry_after:.3f}",
                    "X-RateLimit-Bucket": "fake-bucket", "X-RateLimit-Scope": "user",
                    "Via": "1.1 google",  # discord.py treats a 429 without it as a Cloudflare ban
                }
                payload = {"message": "You are being rate limited.", "retry_after": limit.retry_after, "global": False}
            else:
                with self.state.cond:
                    payload = self._route(request.method, path, body, request.query)
                if payload is None:
                    status = 204
        except DiscordError as exc:
            status = exc.status
            payload = {"message": str(exc), "code": exc.code}
            if exc.errors:
                payload["errors"] = exc.errors
        with self.state.cond:
            self.state.calls.append(Call(request.method, path, body, status, time.monotonic(), authorized))
        self.state.changed()
        if status < 300 and self._take_loss(request.method, path):
            assert request.transport is not None
            request.transport.close()  # done, but the answer never arrives
            raise web.HTTPInternalServerError()  # not sent: the connection is gone
        if status == 204:
            return web.Response(status=204, headers=headers)
        # Exactly "application/json", as Discord sends it (discord.py compares the header).
        return web.Response(
            body=json.dumps(payload).encode(), status=status,
            headers={**headers, "Content-Type": "application/json"},
        )

    def _check_mentions(self, method: str, path: str, body: dict[str, Any]) -> None:
        """Every request that can carry content must suppress pings itself (Discord would
        ping on a missing field, not refuse it: the fake refuses and records it, so a test
        notices). Checked on the request, never on the stored message."""
        message = message_body(method, path, body)
        if message is None or suppresses_pings(message.get("allowed_mentions")):
            return
        with self.state.cond:
            self.state.unsuppressed.append(f"{method} {path}")
        raise DiscordError(400, 50035, "Invalid Form Body (fake Discord: allowed_mentions must parse nothing)",
                           {"allowed_mentions": {"_errors": [{"code": "ROOST_PINGS", "message": "missing or pings"}]}})

    def _take_loss(self, method: str, path: str) -> bool:
        with self.state.cond:
            for loss in self._lose:
                if loss[0] == method and path.startswith(loss[1]):
                    self._lose.remove(loss)
                    return True
        return False

    def _take_failure(self, method: str, path: str) -> _Failure | None:
        with self.state.cond:
            for failure in self._failures:
                if failure.method == method and path.startswith(failure.path_prefix):
                    if failure.skip > 0:
                        failure.skip -= 1
                        return None
                    failure.remaining -= 1
                    if failure.remaining <= 0:
                        self._failures.remove(failure)
                    return failure
        return None

    def _take_rate_limit(self, method: str, path: str) -> _RateLimit | None:
        with self.state.cond:
            for limit in self._rate_limits:
                if limit.method == method and path.startswith(limit.path_prefix):
                    self._rate_limits.remove(limit)
                    return limit
        return None

    def _route(self, method: str, path: str, body: dict[str, Any], query: Any) -> Any:  # noqa: C901, PLR0911
        parts = path.strip("/").split("/")
        s = self.state
        match method, parts:
            case "GET", ["users", "@me"]:
                return s.user_payload(self.bot_id)
            case "GET", ["oauth2", "applications", "@me"]:
                return self._app_info()
            case "GET", ["gateway", "bot"]:
                return {"url": self.gateway_url, "shards": 1,
                        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}
            case "GET", ["gateway"]:
                return {"url": self.gateway_url}
            case "PUT", ["applications", _, "commands"] | ["applications", _, "guilds", _, "commands"]:
                s.commands = [
                    {**c, "id": snowflake(), "application_id": self.application_id, "version": snowflake()}
                    for c in body.get("_list", [])
                ]
                return s.commands
            case "POST", ["users", "@me", "channels"]:
                recipient = str(body.get("recipient_id"))
                if recipient not in s.users or recipient == self.bot_id:
                    raise DiscordError(400, 10013, "Unknown User")
                return s.channel_payload(s.channels[self.dm_channel(recipient)])
            case "GET", ["channels", cid]:
                return s.channel_payload(self._channel(cid))
            case "POST", ["channels", cid, "typing"]:
                self._channel(cid)
                return None
            case "POST", ["channels", cid, "messages"]:
                self._channel(cid)
                return s.message_payload(self._create(cid, body))
            case "GET", ["channels", cid, "messages"]:
                self._channel(cid)
                return [s.message_payload(m) for m in self._history(cid, query)]
            case "GET", ["channels", cid, "messages", mid]:
                return s.message_payload(self._message(cid, mid))
            case "PATCH", ["channels", cid, "messages", mid]:
                message = self._message(cid, mid)
                if message.author_id != self.bot_id:
                    raise DiscordError(403, 50005, "Cannot edit a message authored by another user")
                return s.message_payload(self._edit(message, body))
            case "DELETE", ["channels", cid, "messages", mid]:
                self._message(cid, mid).deleted = True
                return None
            case "POST", ["interactions", iid, token, "callback"]:
                return self._callback(iid, token, body)
            case "PATCH", ["webhooks", _, token, "messages", "@original"]:
                return self._edit_original(token, body)
            case "POST", ["webhooks", _, token]:
                return self._followup(token, body)
        raise DiscordError(404, 0, f"404: Not Found ({method} {path})")

    def _history(self, cid: str, query: Any) -> list[StoredMessage]:
        """Discord's channel history: `limit` 1–100 (default 50); with `after` the `limit`
        messages right after it, with `before` (or neither) the `limit` right before it (the
        newest); `around` is not served. Always newest first, as Discord answers."""
        if "around" in query:
            raise DiscordError(400, 0, "fake Discord: history `around` is not served")
        if "after" in query and "before" in query:  # Discord: mutually exclusive
            raise _form_error("before", "before, after and around are mutually exclusive.")
        try:
            limit = int(query.get("limit", 50))
            after = int(query["after"]) if "after" in query else None
            before = int(query["before"]) if "before" in query else None
        except ValueError:
            raise _form_error("limit", "Value is not a snowflake or int.") from None
        if not 1 <= limit <= 100:
            raise _form_error("limit", "int value should be less than or equal to 100.")
        s = self.state
        mine = sorted(
            (m for m in s.messages.values() if m.channel_id == cid and not m.deleted and not m.flags & EPHEMERAL),
            key=lambda m: int(m.id),
        )
        if before is not None:
            mine = [m for m in mine if int(m.id) < before]
        if after is not None:
            page = [m for m in mine if int(m.id) > after][:limit]
        else:
            page = mine[-limit:]
        return list(reversed(page))

    def _app_info(self) -> dict[str, Any]:
        return {
            "id": self.application_id, "name": "roost", "description": "", "icon": None,
            "bot_public": False, "bot_require_code_grant": False,
            "owner": self.state.user_payload(self.bot_id), "verify_key": "00", "flags": self._app_flags(),
            "summary": "", "team": None, "interactions_endpoint_url": None,
        }

    def _channel(self, cid: str) -> Channel:
        channel = self.state.channels.get(cid)
        if channel is None:
            raise DiscordError(404, 10003, "Unknown Channel")
        return channel

    def _message(self, cid: str, mid: str) -> StoredMessage:
        message = self.state.messages.get(mid)
        if message is None or message.channel_id != cid or message.deleted:
            raise DiscordError(404, 10008, "Unknown Message")
        return message

    def _validate(self, body: dict[str, Any]) -> None:
        content = body.get("content")
        if content is not None and len(content) > MAX_CONTENT:
            raise _form_error("content", f"Must be {MAX_CONTENT} or fewer in length.")
        rows = body.get("components") or []
        if len(rows) > 5:
            raise _form_error("components", "Must be 5 or fewer in length.")
        for n, row in enumerate(rows):
            buttons = row.get("components", [])
            if len(buttons) > 5:
                raise _form_error(f"components.{n}.components", "Must be 5 or fewer in length.")
            for b in buttons:
                if len(b.get("custom_id", "")) > 100:
                    raise _form_error(f"components.{n}.custom_id", "Must be 100 or fewer in length.")
                if len(b.get("label", "")) > 80:
                    raise _form_error(f"components.{n}.label", "Must be 80 or fewer in length.")

    def _upload(self, f: dict[str, Any]) -> dict[str, Any]:
        aid = snowflake()
        self.state.uploads[aid] = f.get("raw", b"")
        return {"id": aid, "filename": f["filename"], "size": len(f["data"]),
                "url": "http://127.0.0.1/x", "proxy_url": "http://127.0.0.1/x", "data": f["data"]}

    def _create(self, cid: str, body: dict[str, Any], flags: int = 0) -> StoredMessage:
        self._validate(body)
        files = body.get("_files", [])
        if not body.get("content") and not body.get("components") and not files and not body.get("embeds"):
            raise DiscordError(400, 50006, "Cannot send an empty message")
        nonce = body.get("nonce")
        if nonce and body.get("enforce_nonce"):  # Discord answers a repeated nonce with the first message
            same = next((m for m in self.state.messages.values() if m.channel_id == cid and m.nonce == str(nonce)), None)
            if same is not None:
                return same
        ref = (body.get("message_reference") or {}).get("message_id")
        message = StoredMessage(
            snowflake(), cid, self.bot_id, body.get("content") or "",
            components=body.get("components") or [],
            attachments=[self._upload(f) for f in files],
            allowed_mentions=body.get("allowed_mentions"),
            flags=flags | int(body.get("flags") or 0),
            reference=str(ref) if ref else None,
            nonce=str(nonce) if nonce else None,
        )
        self.state.messages[message.id] = message
        self.state.order.append(message.id)
        return message

    def _edit(self, message: StoredMessage, body: dict[str, Any]) -> StoredMessage:
        self._validate(body)
        if "content" in body:
            message.content = body["content"] or ""
        if "components" in body:
            message.components = body["components"] or []
        message.allowed_mentions = body.get("allowed_mentions", message.allowed_mentions)
        message.edits += 1
        return message

    def _interaction_by_token(self, token: str) -> Interaction:
        found = next((i for i in self.state.interactions.values() if i.token == token), None)
        if found is None:
            raise DiscordError(404, 10015, "Unknown Webhook")
        return found

    def _callback(self, iid: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        interaction = self.state.interactions.get(iid)
        if interaction is None or interaction.token != token:
            raise DiscordError(404, 10062, "Unknown interaction")
        if time.monotonic() - interaction.created > self.interaction_deadline_s:
            interaction.rejected.append(10062)
            raise DiscordError(404, 10062, "Unknown interaction")
        if interaction.acknowledged:
            interaction.rejected.append(40060)
            raise DiscordError(400, 40060, "Interaction has already been acknowledged.")
        kind, data = int(body["type"]), body.get("data") or {}
        result: dict[str, Any] = {"interaction": {
            "id": iid, "type": 3 if interaction.message_id else 2,
            "response_message_loading": kind == 5,
            "response_message_ephemeral": bool(int(data.get("flags") or 0) & EPHEMERAL),
        }}
        message: StoredMessage | None = None
        if kind == 4:
            message = self._create(interaction.channel_id, data)
            interaction.followups.append({"content": message.content, "flags": message.flags, "id": message.id})
        elif kind == 7 and interaction.message_id:
            message = self._edit(self.state.messages[interaction.message_id], data)
        interaction.responses.append({"type": kind, "data": data})
        if message is not None:
            result["interaction"]["response_message_id"] = message.id
            result["resource"] = {"type": kind, "message": self.state.message_payload(message)}
        return result

    def _edit_original(self, token: str, body: dict[str, Any]) -> dict[str, Any]:
        interaction = self._interaction_by_token(token)
        if not interaction.acknowledged:
            raise DiscordError(404, 10008, "Unknown Message")
        if interaction.message_id is not None and interaction.responses[0]["type"] in (6, 7):
            return self.state.message_payload(self._edit(self.state.messages[interaction.message_id], body))
        return self._followup(token, body)

    def _followup(self, token: str, body: dict[str, Any]) -> dict[str, Any]:
        interaction = self._interaction_by_token(token)
        if not interaction.acknowledged:
            raise DiscordError(404, 10015, "Unknown Webhook")
        message = self._create(interaction.channel_id, body)
        interaction.followups.append({"content": message.content, "flags": message.flags, "id": message.id})
        return self.state.message_payload(message)


def message_body(method: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The part of a request that can carry message content, or None for other requests:
    message sends and edits, webhook (interaction follow-up) sends and edits, and the
    interaction responses that post or update a message (types 4 and 7)."""
    parts = path.strip("/").split("/")
    match method, parts:
        case "POST", ["channels", _, "messages"] | ["webhooks", _, _]:
            return body
        case "PATCH", ["channels", _, "messages", _] | ["webhooks", _, _, "messages", _]:
            return body
        case "POST", ["interactions", _, _, "callback"] if int(body.get("type") or 0) in (4, 7):
            data = body.get("data")
            return data if isinstance(data, dict) else {}
    return None


def suppresses_pings(allowed: Any) -> bool:
    """`allowed_mentions` that lets nobody be pinged: parses nothing, lists nobody."""
    return (
        isinstance(allowed, dict) and allowed.get("parse") == []
        and not allowed.get("users") and not allowed.get("roles") and not allowed.get("replied_user")
    )


async def _body(request: web.Request) -> dict[str, Any]:
    """JSON body, or a multipart form's payload_json plus its files (`_files`)."""
    if request.content_type == "application/json":
        data = await request.json()
        return data if isinstance(data, dict) else {"_list": data}
    if request.content_type.startswith("multipart/"):
        out: dict[str, Any] = {"_files": []}
        reader = await request.multipart()
        async for part in reader:
            raw = await part.read()  # type: ignore[union-attr]
            if part.name == "payload_json":  # type: ignore[union-attr]
                out.update(json.loads(raw))
            else:
                out["_files"].append({"filename": part.filename, "data": raw.decode(errors="replace"),  # type: ignore[union-attr]
                                      "raw": bytes(raw)})
        return out
    return {}
