"""Tool definitions and the registry: a tool is a name, a pydantic input model, a risk class
and an async function. Errors raised by a tool become error results, never crashes."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from agent_core.risk import Risk, Scope

TOOL_OUTPUT_CAP = 16_000
"""Characters of one tool result that go to the model."""

DEFAULT_TOOL_TIMEOUT_S = 30.0


class ToolError(Exception):
    """Raised by a tool to report a failure the model should read (becomes is_error)."""


class Messenger(Protocol):
    """Sends a message to the chat a session belongs to.

    Implementers raise on delivery failure and return only once the platform confirmed it.
    """

    async def send(self, text: str) -> str:
        """Deliver text; return a short confirmation such as the platform message id."""
        ...


class MemoryBackend(Protocol):
    """Search and write access to memory, already confined to the session's scope."""

    async def search(self, query: str, limit: int = 8) -> list[dict[str, Any]]: ...

    async def append_log(self, text: str) -> Path: ...


@dataclass(slots=True)
class ToolContext:
    """What a tool may know about the run that called it."""

    session_key: str
    scope: Scope
    workspace: Path
    run_id: str = ""
    memory: MemoryBackend | None = None
    messenger: Messenger | None = None
    requester: str = ""
    scheduled: bool = False
    """The run is a scheduled job's (bot.ratelimits: the owner's job meets a group's budget)."""
    """Identity of the person whose message started the run (audit, rate limits)."""
    extra_roots: tuple[str, ...] = ()
    """Workspace-relative folders the owner shared with this (sub) scope, beyond its own."""
    emit: Callable[[Any], Awaitable[None]] | None = None
    """The run's event stream (set by the loop): tools such as `plan` report progress."""
    end: RunEnd | None = None
    """Set by a tool to end the run after this turn's results are stored (plan abort,
    too many unsupported advances)."""
    cap_run_id: str = ""
    """The run whose tool-call cap this call counts against when not its own (a worker's:
    the run that spawned it)."""
    loaded: set[str] = field(default_factory=set)
    """Deferred tools `find_tools` loaded in this run: offered from the next turn on."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A tool's request to end the run honestly: `message` is shown to the user as is."""

    reason: str
    message: str
    failed: bool = False


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A result with more than text: `blocks` (Messages API image blocks) follow the text in
    the tool_result. Only the text is capped, stored as the call's output and audited."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()


I = TypeVar("I", bound=BaseModel)

ToolFunc = Callable[[Any, ToolContext], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool(Generic[I]):
    name: str
    description: str
    input_model: type[I]
    risk: Risk
    func: Callable[[I, ToolContext], Awaitable[str | ToolOutput]]
    timeout_s: float | None = None
    """None → the registry default (30 s)."""
    describe_action: Callable[[I], str] | None = None
    """Full text of what the call will do, shown on approval cards (e.g. the command)."""
    offered_to: Callable[[Scope, str], bool] | None = None
    """Whether the tool is offered to a run of (scope, session key); None → always. A tool
    not offered is also refused by the policy, this only keeps it out of the request."""
    deferred: Callable[[], bool] | None = None
    """True → the schema is sent only once `find_tools` loaded it in the run (many MCP tools)."""

    def schema(self) -> dict[str, Any]:
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}

    def action_text(self, parsed: I) -> str:
        if self.describe_action is not None:
            return self.describe_action(parsed)
        return f"{self.name} {parsed.model_dump_json(indent=2)}"


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._schemas: list[dict[str, Any]] | None = None
        self.version = 0
        """Bumped on every change of the tool set or a definition (the loop's cache key)."""
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        self._changed()

    def _changed(self) -> None:
        self._schemas = None
        self.version += 1

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is not None:
            self._changed()

    def replace_prefixed(self, prefix: str, tools: Iterable[Tool[Any]]) -> None:
        """Swap every tool whose name starts with `prefix` for `tools` (a reconnected MCP
        server's current list), keeping the others and their order."""
        new = list(tools)
        if any(not t.name.startswith(prefix) for t in new):
            raise ValueError(f"every replacing tool must start with {prefix!r}")
        kept = {n: t for n, t in self._tools.items() if not n.startswith(prefix)}
        if [t.schema() for t in self._tools.values() if t.name.startswith(prefix)] == [t.schema() for t in new]:
            if all(self._tools.get(t.name) is not None for t in new):
                for t in new:  # same definitions: fresh functions, same cached schemas
                    self._tools[t.name] = t
                return
        self._tools = {**kept, **{t.name: t for t in new}}
        self._changed()

    def offered(self, scope: Scope, session_key: str, loaded: Iterable[str] = ()) -> list[str]:
        """Names of the tools offered to a run of (scope, session), in registration order: a
        deferred tool only once loaded."""
        loaded = set(loaded)
        return [
            n for n, t in self._tools.items()
            if (t.offered_to is None or t.offered_to(scope, session_key))
            and (t.deferred is None or n in loaded or not t.deferred())
        ]  # fmt: skip

    def deferred(self, scope: Scope, session_key: str) -> list[Tool[Any]]:
        """The tools offered to (scope, session) whose schemas wait for `find_tools`."""
        return [
            t for t in self._tools.values()
            if t.deferred is not None and t.deferred() and (t.offered_to is None or t.offered_to(scope, session_key))
        ]  # fmt: skip

    def schemas_of(self, names: Iterable[str]) -> list[dict[str, Any]]:
        wanted = set(names)
        all_schemas = self.schemas()
        return [s for s in all_schemas if s["name"] in wanted]

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """Tool definitions for the Messages API, in registration order (byte-stable).

        Built once: generating a pydantic JSON schema costs about a millisecond per tool,
        which would otherwise be paid on every run."""
        if self._schemas is None:
            self._schemas = [t.schema() for t in self._tools.values()]
        return copy.deepcopy(self._schemas)


def cap_output(text: str, cap: int = TOOL_OUTPUT_CAP) -> str:
    """Cut head + tail so the model sees both ends, with a note of what was dropped."""
    if len(text) <= cap:
        return text
    note_budget = 120
    keep = max(cap - note_budget, 0)
    head = keep * 2 // 3
    tail = keep - head
    dropped = len(text) - head - tail
    note = f"\n\n[… {dropped} characters omitted of {len(text)} …]\n\n"
    return text[:head] + note + (text[-tail:] if tail else "")
