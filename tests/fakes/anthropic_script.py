"""What the fake Messages API answers: response specs, the script queue, the echo responder.

A *response* is one of:

- ``Reply(*parts)`` — an assistant message. Parts are content blocks (``Thinking``, ``Text``,
  ``ToolUse``, ``RawToolUse``) and stream directives (``Stall``, ``Disconnect``, ``StreamError``,
  ``Truncate``) that act at their position in the stream.
- ``Error(status, ...)`` — an HTTP error answer in the real error shape.
- ``Stall(seconds)`` — hang before sending any response, then drop the connection.
- ``Disconnect()`` — drop the connection without any response.

Responders may also return a bare block (``Text``/``ToolUse``/``RawToolUse``) or a ``str``;
``as_response`` wraps those in a ``Reply``.
"""

from __future__ import annotations

import dataclasses
import secrets
import string
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agent_core.prompt import ADDRESSED_SOURCE, TAIL_HEADER, frame_untrusted

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    """An id shaped like the real service's (``toolu_01…``, ``msg_01…``, ``req_011C…``)."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(22))


@dataclass(frozen=True, slots=True)
class Text:
    """A text block, streamed as ``text_delta`` chunks of ``chunk_size`` characters with
    ``delay_s`` of pacing between chunks (streaming only; ignored for non-streaming)."""

    text: str
    chunk_size: int = 20
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Thinking:
    """A ``thinking`` block, streamed as ``thinking_delta`` chunks then one ``signature_delta``
    (``redacted``: a ``redacted_thinking`` block with opaque ``data`` instead). ``signature=None``
    gets a fresh signature when served; the fake remembers what it signed and refuses a block
    sent back altered (anthropic_thinking)."""

    text: str
    signature: str | None = None
    redacted: bool = False
    chunk_size: int = 20


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A ``tool_use`` block; ``input`` is streamed as ``input_json_delta`` chunks of its JSON.
    ``id=None`` gets a fresh ``toolu_…`` id each time it is served."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    chunk_size: int = 16


@dataclass(frozen=True, slots=True)
class ServerToolUse:
    """The service's own tool call (``server_tool_use``, e.g. a web search); input streamed
    like a tool use's. ``id=None`` gets a fresh ``srvtoolu_…`` id."""

    name: str = "web_search"
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True)
class WebSearchResults:
    """A ``web_search_tool_result`` block answering the ``ServerToolUse`` before it:
    ``results`` are (url, title) pairs, sent whole at the block's start as the service does."""

    results: tuple[tuple[str, str], ...] = ()
    tool_use_id: str | None = None


@dataclass(frozen=True, slots=True)
class RawToolUse:
    """A ``tool_use`` block whose ``partial_json`` deltas are ``raw_json`` verbatim, valid or
    not. Non-streaming answers carry the parsed value if ``raw_json`` parses, else the string."""

    name: str
    raw_json: str
    id: str | None = None
    chunk_size: int = 16


@dataclass(frozen=True, slots=True)
class Stall:
    """Inside a ``Reply``: pause the stream here for ``seconds``. As a whole response: hang for
    ``seconds`` (``None`` = until the client gives up or the fake closes), then drop the
    connection. Closing the fake ends every stall at once; so does setting ``until`` (a
    ``threading.Event`` the test holds: a pause that ends when the test says, not by time)."""

    seconds: float | None = None
    until: threading.Event | None = None


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Drop the TCP connection: before any response when used as a whole response, or
    mid-stream at its position inside a ``Reply``."""


@dataclass(frozen=True, slots=True)
class StreamError:
    """Inside a ``Reply``: send an SSE ``event: error`` here and end the stream, as the real
    service does when it overloads mid-answer. Non-streaming requests get the HTTP error."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True, slots=True)
class Truncate:
    """Inside a ``Reply``: end the response body cleanly here (a proper end of the chunked
    body, no ``message_stop``), as a proxy that cuts a stream short does. The SDK sees a stream
    that simply ends. Non-streaming requests are answered whole."""


Block: TypeAlias = Thinking | Text | ToolUse | RawToolUse | ServerToolUse | WebSearchResults
Part: TypeAlias = Block | Stall | Disconnect | StreamError | Truncate


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole assistant message. ``stop_reason`` defaults to ``"tool_use"`` when any tool use
    is present, else ``"end_turn"``. ``usage`` overrides fields of the simulated usage."""

    parts: tuple[Part, ...]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: Mapping[str, int] | None = None

    def __init__(
        self,
        *parts: Part,
        stop_reason: str | None = None,
        stop_sequence: str | None = None,
        usage: Mapping[str, int] | None = None,
    ) -> None:
        for part in parts:
            if not isinstance(part, Block | Stall | Disconnect | StreamError | Truncate):
                raise TypeError(f"not a Reply part: {part!r}")
        object.__setattr__(self, "parts", tuple(parts))
        object.__setattr__(self, "stop_reason", stop_reason)
        object.__setattr__(self, "stop_sequence", stop_sequence)
        object.__setattr__(self, "usage", usage)

    @property
    def blocks(self) -> tuple[Block, ...]:
        return tuple(p for p in self.parts if isinstance(p, Block))

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return (
            "tool_use"
            if any(isinstance(b, ToolUse | RawToolUse) for b in self.blocks)
            else "end_turn"
        )

    def with_ids(self, *, numbered: bool = False) -> Reply:
        """The same reply with every tool use given a concrete id (what actually gets served):
        random ``toolu_01…`` ids like the real service, or with ``numbered`` ``toolu_1``,
        ``toolu_2``, … counted per response, as some Anthropic-compatible endpoints do (so
        the same ids come back in every response)."""
        counter = iter(range(1, len(self.parts) + 1))
        searched: list[str] = []

        def server_id(part: ServerToolUse) -> ServerToolUse:
            done = part if part.id else dataclasses.replace(part, id=new_id("srvtoolu_01"))
            searched.append(done.id or "")
            return done

        staged = tuple(
            server_id(p) if isinstance(p, ServerToolUse)
            else dataclasses.replace(p, tool_use_id=searched[-1] if searched else new_id("srvtoolu_01"))
            if isinstance(p, WebSearchResults) and p.tool_use_id is None
            else p
            for p in self.parts
        )  # fmt: skip
        parts = tuple(
            dataclasses.replace(p, id=f"toolu_{next(counter)}" if numbered else new_id("toolu_01"))
            if isinstance(p, ToolUse | RawToolUse) and p.id is None
            else dataclasses.replace(p, signature=new_id("Eu8BCkYIBRgCKkA"))
            if isinstance(p, Thinking) and p.signature is None
            else p
            for p in staged
        )
        return Reply(
            *parts, stop_reason=self.stop_reason, stop_sequence=self.stop_sequence, usage=self.usage
        )


_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_DEFAULT_MESSAGES = {
    "rate_limit_error": "Number of request tokens has exceeded your per-minute rate limit",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
}


@dataclass(frozen=True, slots=True)
class Error:
    """An HTTP error answer ``{"type":"error","error":{...},"request_id":...}``.
    ``retry_after`` sets the ``retry-after`` header (seconds); ``should_retry`` sets
    ``x-should-retry``, which the SDK obeys over its own status-code rules."""

    status: int
    error_type: str | None = None
    message: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None

    @property
    def resolved_type(self) -> str:
        return self.error_type or _DEFAULT_ERROR_TYPES.get(self.status, "api_error")

    @property
    def resolved_message(self) -> str:
        return self.message or _DEFAULT_MESSAGES.get(self.resolved_type, self.resolved_type)


Response: TypeAlias = Reply | Error | Stall | Disconnect
Responder: TypeAlias = Callable[[dict[str, Any]], "Response | Block | str"]
Predicate: TypeAlias = Callable[[dict[str, Any]], bool]


def reply_text(
    text: str, *, chunk_size: int = 20, delay_s: float = 0.0, **reply_kwargs: Any
) -> Reply:
    return Reply(Text(text, chunk_size=chunk_size, delay_s=delay_s), **reply_kwargs)


def reply_tools(
    *tool_uses: ToolUse | RawToolUse, text: str | None = None, **reply_kwargs: Any
) -> Reply:
    """Tool uses, optionally preceded by a text block (as the model often does)."""
    parts: tuple[Part, ...] = ((Text(text),) if text else ()) + tool_uses
    return Reply(*parts, **reply_kwargs)


def as_response(value: object) -> Response:
    """Normalise what a responder returned; raises TypeError for anything else."""
    if isinstance(value, Reply | Error | Stall | Disconnect):
        return value
    if isinstance(value, Block):
        return Reply(value)
    if isinstance(value, str):
        return reply_text(value)
    raise TypeError(
        f"responder returned {value!r}; expected Reply, Error, Stall, Disconnect, a block or str"
    )


def is_context_tail(block: Mapping[str, Any]) -> bool:
    """Roost's refreshed context (clock, today's log, pinned goal) that rides at the end of
    the newest user message, after the conversation's cache breakpoint: not the user's."""
    return block.get("type") == "text" and str(block.get("text", "")).startswith(TAIL_HEADER)


def addressed(sender: str, text: str) -> str:
    """A message addressed to Roost in a sub scope (a group, a paired DM) as the model gets
    it: framed as untrusted, its sender inside the frame."""
    return frame_untrusted(f"[{sender}] {text}", ADDRESSED_SOURCE)


def user_blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The newest message's content blocks as the user (or the tools) wrote them: without
    Roost's context tail."""
    content = (body.get("messages") or [{}])[-1].get("content") or []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if not is_context_tail(b)]


def user_texts(body: Mapping[str, Any]) -> list[str]:
    """The text blocks of the newest message, without Roost's context tail."""
    return [str(b.get("text", "")) for b in user_blocks(body) if b.get("type") == "text"]


def context_tail(body: Mapping[str, Any]) -> str:
    """Roost's volatile context as sent (the pinned goal and step, the clock, today's log):
    the tail of the newest message, or the system blocks after the cached one."""
    content = (body.get("messages") or [{}])[-1].get("content") or []
    tails = [str(b["text"]) for b in content if isinstance(b, dict) and is_context_tail(b)]
    if tails:
        return tails[-1]
    system = body.get("system") or []
    if isinstance(system, str):
        return ""
    cached = max((i for i, b in enumerate(system) if b.get("cache_control")), default=-1)
    return "\n\n".join(str(b.get("text", "")) for b in system[cached + 1 :])


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user text block (not Roost's context tail); failing that, of the
    last tool_result in it."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        fallback = ""
        for block in reversed(content or []):
            if is_context_tail(block):
                continue
            if block.get("type") == "text":
                return str(block.get("text", ""))
            if block.get("type") == "tool_result" and not fallback:
                fallback = _tool_result_text(block)
        return fallback
    return ""


def echo_responder(body: dict[str, Any]) -> Response:
    """The default: ``echo: <last user text>`` — lets many unscripted sessions run at once and
    still tell their answers apart."""
    return reply_text(f"echo: {last_user_text(body)}")


class ScriptQueue:
    """Thread-safe source of answers: the first queued keyed entry whose predicate matches,
    then the plain queue, then the responder."""

    def __init__(self, responder: Responder) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Response] = deque()
        self._keyed: list[tuple[Predicate, Response]] = []
        self.responder = responder

    def add(self, responses: tuple[Response, ...], predicate: Predicate | None = None) -> None:
        checked = [_checked(r) for r in responses]
        with self._lock:
            if predicate is None:
                self._queue.extend(checked)
            else:
                self._keyed.extend((predicate, r) for r in checked)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + len(self._keyed)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._keyed.clear()

    def next(self, body: dict[str, Any]) -> Response:
        """The answer for ``body``; whatever a predicate or the responder raises propagates."""
        with self._lock:
            for n, (predicate, response) in enumerate(self._keyed):
                if predicate(body):
                    del self._keyed[n]
                    return response
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        # Outside the lock: a responder may well call back into the fake.
        return as_response(responder(body))


def _checked(response: object) -> Response:
    if not isinstance(response, Reply | Error | Stall | Disconnect):
        raise TypeError(f"not a scripted response: {response!r} (wrap blocks in Reply)")
    return response


def _tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(
        str(b.get("text", ""))
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text"
    )
