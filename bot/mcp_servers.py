"""MCP servers' connections and their tools in Roost's one tool registry.

`McpManager` owns one `ServerLink` per configured server. Each link connects in its own
background task (start-up never waits on a server), registers the server's tools into the
`ToolRegistry` as `mcp__<server>__<tool>`, and reconnects with backoff when the connection
breaks. A call that finds the session dead (the child exited, the HTTP server restarted and
forgot the session) reconnects and is retried once. The calls themselves go through the
ordinary `ToolRunner`: policy, approvals, grants, timeouts and audit exactly as for built-in
tools. The `mcp` SDK is imported only here and only when a server is configured.

Invariants: a stdio server's child runs in its own process group with only the environment
it is configured with (the SDK adds PATH, HOME, SHELL, TERM, USER, LOGNAME) — never Roost's
secrets; it is ended with Roost. `${VAR}` values never reach a log line, an error text or
`roost mcp list`: every message leaving a link passes `redact`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from agent_core.policy import MCP_PREFIX, Policy
from agent_core.prompt import frame_untrusted
from agent_core.risk import Scope
from agent_core.tools import TOOL_OUTPUT_CAP, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, cap_output
from bot.mcp_settings import McpServerSettings, McpSettings, UnresolvedVariable

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 120.0
CONNECT_TIMEOUT_S = 30.0
IMAGE_CAP_BYTES = 5 * 1024 * 1024
"""Base64 characters of one image passed to the model (the API's per-image limit)."""
_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_NAME_OK = re.compile(r"[^a-zA-Z0-9_-]")
_API_NAME_MAX = 64


def tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, fitted to the Messages API's `^[a-zA-Z0-9_-]{1,64}$`: other
    characters become `_`; a name too long is cut and given a short hash so two long names
    stay distinct."""
    name = f"{MCP_PREFIX}{server}__{_NAME_OK.sub('_', tool)}"
    if len(name) <= _API_NAME_MAX:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: _API_NAME_MAX - 9]}_{digest}"


def input_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A server's input schema as the Messages API accepts it: an object schema, without
    `$schema`/`$id`/`title` and without top-level combinators the API refuses."""
    out = copy.deepcopy(dict(schema or {}))
    for key in ("$schema", "$id", "title", "oneOf", "anyOf", "allOf", "not", "if", "then", "else"):
        out.pop(key, None)
    out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    return out


class McpInput(BaseModel):
    """Arguments of an MCP tool: any JSON object (the server validates them against its
    schema); `model_json_schema` returns the server's schema as normalised."""

    model_config = ConfigDict(extra="allow")
    mcp_schema: ClassVar[dict[str, Any]] = {}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return copy.deepcopy(cls.mcp_schema)


def redactor(secrets: list[str]) -> Callable[[str], str]:
    ordered = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(text: str) -> str:
        for secret in ordered:
            text = text.replace(secret, "[redacted]")
        return text

    return redact


@dataclass(frozen=True, slots=True)
class ServerState:
    """What `roost mcp list`, `roost doctor` and /status show of one server."""

    name: str
    transport: str
    state: str
    """"connecting", "connected", "failed", "disabled" or "stopped"."""
    tools: int
    error: str | None


class DeadSession(Exception):
    """The session is gone (process exited, connection lost, server forgot the session)."""


def _is_dead(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, MCPError):
        text = str(exc).lower()
        return getattr(getattr(exc, "error", None), "code", None) == -32000 or any(
            w in text for w in ("session", "terminated", "closed", "connection")
        )
    return isinstance(exc, Exception)


class ServerLink:
    """One server: connection task, current session, the tools it registered."""

    def __init__(
        self,
        name: str,
        config: McpServerSettings,
        on_tools: Callable[[ServerLink, list[Any]], None],
        *,
        environ: Mapping[str, str] | None = None,
        stderr_dir: Path | None = None,
        backoff_min_s: float = BACKOFF_MIN_S,
    ) -> None:
        self.name = name
        self.config = config
        self._on_tools = on_tools
        self._environ = os.environ if environ is None else environ
        self._stderr_dir = stderr_dir
        self._backoff_min_s = backoff_min_s
        self.redact = redactor(config.secret_values(self._environ))
        self.state = "connecting" if config.enabled else "disabled"
        self.error: str | None = None
        self.tools: list[Any] = []
        self.connects = 0
        self.failures = 0
        """Connection attempts that failed so far (a call waits for at most one more)."""
        self._session: Any = None
        self._dead: Any = None
        """The session a call found dead, until the task replaced it."""
        self._broken = asyncio.Event()
        self._poke = asyncio.Event()
        """Set when the session broke or the server said its tool list changed."""
        self._stale = False
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.config.enabled:
            self._task = asyncio.create_task(self._serve(), name=f"mcp:{self.name}")

    async def aclose(self) -> None:
        self._closing = True
        self._broken.set()
        self._poke.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                async with asyncio.timeout(10):
                    await asyncio.wait({task})
            except TimeoutError:
                task.cancel()
                await asyncio.wait({task})
        self.state = "stopped"

    async def settled(self, timeout_s: float, *, connects: int = 1) -> str:
        """Wait until the server connected `connects` times, or failed; returns its state
        (still "connecting" when `timeout_s` ran out)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                async with self._changed:
                    await self._changed.wait_for(
                        lambda: (self.state == "connected" and self.connects >= connects)
                        or self.state in ("failed", "disabled", "stopped")
                    )
        return self.state

    def snapshot(self) -> ServerState:
        return ServerState(self.name, self.config.transport, self.state, len(self.tools), self.error)

    async def _set(self, state: str, error: str | None = None) -> None:
        changed = state != self.state or error != self.error
        self.state, self.error = state, error
        if changed and state == "failed":
            log.warning("mcp.server_failed: %s: %s", self.name, error)
        elif changed and state == "connected":
            log.info("mcp.server_connected: %s (%d tools)", self.name, len(self.tools))
        async with self._changed:
            self._changed.notify_all()

    async def _serve(self) -> None:
        delay = self._backoff_min_s
        while not self._closing:
            self._wake.clear()
            failed = False
            try:
                async with contextlib.AsyncExitStack() as stack:
                    async with asyncio.timeout(CONNECT_TIMEOUT_S):
                        session = await self._open(stack)
                        listed = await _all_tools(session)
                    self.tools = [t for t in listed if self.config.tools.admits(t.name)]
                    self.connects += 1
                    self._on_tools(self, self.tools)
                    self._session, delay = session, self._backoff_min_s
                    await self._set("connected")
                    await self._until_broken(session)
            except Exception as exc:  # noqa: BLE001 — any failure is one log line and a retry
                failed = True
                self.failures += 1
                await self._set("failed", self.redact(_describe(exc)))
            finally:
                self._session = None
                self._broken.clear()
                self._poke.clear()
            if self._closing:
                break
            if failed:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                delay = min(delay * 2, BACKOFF_MAX_S)
            else:
                await self._set("connecting")

    async def _until_broken(self, session: Any) -> None:
        """Serve the session: re-list the tools whenever the server says they changed."""
        while True:
            await self._poke.wait()
            self._poke.clear()
            if self._broken.is_set():
                return
            if self._stale:
                self._stale = False
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    listed = await _all_tools(session)
                self.tools = [t for t in listed if self.config.tools.admits(t.name)]
                self._on_tools(self, self.tools)
                log.info("mcp.tools_changed: %s (%d tools)", self.name, len(self.tools))
                async with self._changed:
                    self._changed.notify_all()

    async def _on_message(self, message: Any) -> None:
        # Called from the session's receive loop: never await a request here.
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            self._stale = True
            self._poke.set()

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import ClientSession

        if self.config.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=self.config.command,
                args=[_resolve(a, self._environ, "args") for a in self.config.args],
                env=self.config.resolved_env(self._environ),
                cwd=self.config.cwd,
            )
            errlog = stack.enter_context(self._errlog())
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        elif self.config.transport == "sse":
            from mcp.client.sse import sse_client

            url = _resolve(self.config.url or "", self._environ, "url")
            headers = self.config.resolved_headers(self._environ)
            read, write = await stack.enter_async_context(sse_client(url, headers=headers))
        else:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(
                create_mcp_http_client(headers=self.config.resolved_headers(self._environ))
            )
            url = _resolve(self.config.url or "", self._environ, "url")
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
        session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
        await session.initialize()
        return session

    def _errlog(self) -> Any:
        # The child's stderr goes to a file of its own (it may print what it was given),
        # never into Roost's log stream.
        if self._stderr_dir is None:
            return open(os.devnull, "w")  # noqa: SIM115 — closed by the exit stack
        self._stderr_dir.mkdir(parents=True, exist_ok=True)
        return open(self._stderr_dir / f"{self.name}.stderr.log", "a", encoding="utf-8")  # noqa: SIM115

    async def _ready(self, timeout_s: float) -> Any:
        """The live session, waiting (and waking a backing-off reconnect) if needed. A server
        that is down fails the call after one more attempt, not at the call's timeout."""
        failures = self.failures
        self._wake.set()
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(
                    lambda: self._closing
                    or self.failures > failures
                    or (self._session is not None and self._session is not self._dead)
                )
        if self._session is None or self._session is self._dead:
            raise ToolError(f"MCP server {self.name} is not connected ({self.error or self.state})")
        return self._session

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        """Call `tool`; on a dead session reconnect and retry once."""
        if not self.config.enabled:
            raise ToolError(f"MCP server {self.name} is disabled")
        for attempt in (1, 2):
            try:
                session = await self._ready(timeout_s)
            except TimeoutError:
                raise ToolError(
                    f"MCP server {self.name} is not connected ({self.error or self.state})"
                ) from None
            try:
                return await session.call_tool(tool, arguments)
            except Exception as exc:
                if not _is_dead(exc):
                    raise ToolError(self.redact(f"MCP error from {self.name}: {exc}")) from None
                log.info("mcp.session_lost: %s (%s); reconnecting", self.name, self.redact(_describe(exc)))
                if self._session is session:
                    self._dead = session
                    self._broken.set()
                    self._poke.set()
                if attempt == 2:
                    raise ToolError(self.redact(f"MCP server {self.name} failed: {_describe(exc)}")) from None
        raise AssertionError("unreachable")


class McpManager:
    """All configured servers. `apply(settings)` starts, stops and restarts links to match a
    (re)loaded `[mcp]`; tools are offered per the live policy (`policy()`)."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: Callable[[], Policy],
        *,
        environ: Mapping[str, str] | None = None,
        stderr_dir: Path | None = None,
        backoff_min_s: float = BACKOFF_MIN_S,
    ) -> None:
        self._registry = registry
        self._policy = policy
        self._environ = environ
        self._stderr_dir = stderr_dir
        self._backoff_min_s = backoff_min_s
        self.links: dict[str, ServerLink] = {}
        self.settings = McpSettings()
        if registry.get("find_tools") is None:  # offered only while some schemas are deferred
            from agent_core.builtin_tools.find_tools import make_find_tools_tool

            registry.register(make_find_tools_tool(registry))

    def lazy(self) -> bool:
        """Whether MCP schemas wait for `find_tools`: more tools in all than `lazy_above`."""
        return sum(len(link.tools) for link in self.links.values()) > self.settings.lazy_above

    def states(self) -> list[ServerState]:
        return [link.snapshot() for link in self.links.values()]

    def secret_values(self) -> list[str]:
        return self.settings.secret_values(self._environ)

    async def apply(self, settings: McpSettings) -> None:
        from bot.logs import learn_secrets

        learn_secrets(settings.secret_values(self._environ))  # before any connection can log them
        old, self.settings = self.links, settings
        self.links = {}
        for name, config in settings.servers.items():
            link = old.pop(name, None)
            if link is not None and link.config == config:
                self.links[name] = link
                continue
            if link is not None:
                await self._stop(link)
            link = ServerLink(
                name, config, self._register, environ=self._environ, stderr_dir=self._stderr_dir,
                backoff_min_s=self._backoff_min_s,
            )  # fmt: skip
            self.links[name] = link
            link.start()
        for link in old.values():  # removed from roost.toml
            await self._stop(link)

    async def _stop(self, link: ServerLink) -> None:
        self._registry.replace_prefixed(f"{MCP_PREFIX}{link.name}__", [])
        await link.aclose()

    async def aclose(self) -> None:
        links, self.links = list(self.links.values()), {}
        await asyncio.gather(*(self._stop(link) for link in links))

    def _register(self, link: ServerLink, tools: list[Any]) -> None:
        if self.links.get(link.name) is not link:
            return  # replaced or removed meanwhile
        made = {}
        for t in tools:
            made.setdefault(tool_name(link.name, t.name), make_tool(link, t, self._policy, self.lazy))
        self._registry.replace_prefixed(f"{MCP_PREFIX}{link.name}__", made.values())


def make_tool(
    link: ServerLink, listed: Any, policy: Callable[[], Policy], deferred: Callable[[], bool] | None = None
) -> Tool[Any]:
    server, remote = link.name, listed.name
    name = tool_name(server, remote)
    model = type(f"McpInput_{name}", (McpInput,), {"mcp_schema": input_schema(listed.input_schema)})
    timeout_s = link.config.timeout_s

    async def call(parsed: BaseModel, ctx: ToolContext) -> ToolOutput:
        arguments = parsed.model_dump(mode="json")
        result = await link.call(remote, arguments, timeout_s)
        return to_output(result, server, remote, link.redact)

    def describe(parsed: BaseModel) -> str:
        arguments = json.dumps(parsed.model_dump(mode="json"), indent=2, ensure_ascii=False)
        return f"MCP server: {server}\ntool: {remote}\narguments:\n{arguments}"

    def offered(scope: Scope, session_key: str) -> bool:
        return policy().mcp_offered(scope, session_key, server)

    description = (listed.description or listed.title or remote).strip()
    return Tool(
        name=name,
        description=f"[MCP server {server}] {description}"[:4000],
        input_model=model,
        risk=link.config.risk_for(remote),
        func=call,
        timeout_s=timeout_s,
        describe_action=describe,
        offered_to=offered,
        deferred=deferred,
    )


def to_output(result: Any, server: str, tool: str, redact: Callable[[str], str]) -> ToolOutput:
    """A CallToolResult as a tool result: text, image blocks, embedded resources, structured
    content; `isError` → an error result."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            texts.append(item.text)
        elif kind == "image":
            mime = getattr(item, "mime_type", "")
            if mime in _IMAGE_TYPES and len(item.data) <= IMAGE_CAP_BYTES:
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": mime, "data": item.data}})
            else:
                texts.append(f"[image omitted: {mime or 'unknown type'}, {len(item.data)} base64 characters]")
        elif kind == "resource":
            res = item.resource
            text = getattr(res, "text", None)
            if text is not None:
                texts.append(f"[resource {res.uri}]\n{text}")
            else:
                texts.append(f"[binary resource {res.uri} ({getattr(res, 'mime_type', None) or 'unknown type'}) omitted]")
        elif kind == "resource_link":
            texts.append(f"[resource link {item.uri}]")
        else:
            texts.append(f"[{kind or 'unknown'} content omitted]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not texts:
        texts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    text = redact("\n".join(texts))
    if getattr(result, "is_error", False):
        raise ToolError(cap_output(f"MCP tool {tool} on {server} failed: {text or '(no message)'}"))
    body = cap_output(text, TOOL_OUTPUT_CAP - 200)
    return ToolOutput(frame_untrusted(body, f"mcp:{server}") if body else "", tuple(blocks))


async def _all_tools(session: Any) -> list[Any]:
    from mcp.types import PaginatedRequestParams

    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(100):  # a server paging forever is cut off
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _resolve(text: str, environ: Mapping[str, str], where: str) -> str:
    from bot.mcp_settings import resolve

    return resolve(text, environ, where)


def _describe(exc: BaseException) -> str:
    """One line for an error, the innermost cause of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, UnresolvedVariable):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_TIMEOUT_S:g} s"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
