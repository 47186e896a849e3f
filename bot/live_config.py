"""The hot-reloaded part of roost.toml: the `[policy]`, `[limits]` and `[mcp]` tables.

`LiveConfig` polls the file (one small read per interval, default 1 s) and, when its bytes
change, validates both tables. A valid edit applies at once; an invalid one is rejected with
one log line naming each bad key (`policy.groups.telegram:-100.exec: …`) and the last good
configuration stays. Readers take `live.policy` / `live.limits` on every use, so nothing
needs to be told about a change.

The environment (`ROOST_POLICY__…`) is read once at start; a reload reads the file only.
"""

from __future__ import annotations

import asyncio
import logging
import tomllib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from agent_core.policy import Policy
from agent_core.risk import Scope
from agent_core.tools import ToolContext
from bot.limit_settings import LimitSettings
from bot.mcp_settings import McpSettings
from bot.policy_settings import PolicySettings

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0


class LiveConfig:
    """Lifecycle: `await start()` … `await aclose()`; reading works before start too."""

    def __init__(
        self,
        path: Path,
        *,
        policy: PolicySettings,
        limits: LimitSettings,
        known_tools: Iterable[str] = (),
        interval_s: float = DEFAULT_INTERVAL_S,
        mcp: McpSettings | None = None,
        on_mcp: Callable[[McpSettings], Awaitable[None]] | None = None,
    ) -> None:
        """`on_mcp` is awaited with a changed `[mcp]` (the servers are started/stopped)."""
        self._mcp = mcp if mcp is not None else McpSettings()
        self.on_mcp = on_mcp
        self.path = path
        self._policy_settings = policy
        self._policy = policy.to_policy()
        self._limits = limits
        self._known_tools = frozenset(known_tools)
        self._interval_s = interval_s
        self._seen: bytes | None = self._read()
        """The file's bytes last judged; the settings given at start already reflect them."""
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self.checks = 0
        """Edits judged so far (applied or rejected); tests wait on it."""
        self.last_error: str | None = None
        self._closed = False

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def policy_settings(self) -> PolicySettings:
        return self._policy_settings

    @property
    def limits(self) -> LimitSettings:
        return self._limits

    @property
    def mcp(self) -> McpSettings:
        return self._mcp

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("LiveConfig is closed")
        if self._task is None:
            self._warn_unknown_tools(self._policy)
            self._task = asyncio.create_task(self._poll(), name="live-config")

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def __aenter__(self) -> LiveConfig:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def wait_checked(self, after: int, timeout_s: float) -> int:
        """Wait until more than `after` edits were judged; return the count."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(lambda: self.checks > after)
                return self.checks

    async def check(self) -> bool:
        """Judge the file now if its bytes changed; True when a new configuration applied."""
        data = self._read()
        if data is None or data == self._seen:
            # A vanished file keeps the last good configuration (an editor may be saving).
            return False
        self._seen = data
        before = self._mcp
        applied = self._judge(data)
        if applied and self._mcp != before and self.on_mcp is not None:
            await self.on_mcp(self._mcp)
        async with self._changed:
            self.checks += 1
            self._changed.notify_all()
        return applied

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check()
            except Exception:  # a bug here must not stop later reloads
                log.exception("config.reload_failed", extra={"path": str(self.path)})

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def _judge(self, data: bytes) -> bool:
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            return self._reject(f"{self.path.name}: {exc}")
        errors: list[str] = []
        policy = _validate(PolicySettings, document.get("policy", {}), "policy", errors)
        limits = _validate(LimitSettings, document.get("limits", {}), "limits", errors)
        mcp = _validate(McpSettings, document.get("mcp", {}), "mcp", errors)
        if errors or policy is None or limits is None or mcp is None:
            return self._reject("; ".join(errors))
        changed = [name for name, old, new in (
            ("policy", self._policy_settings, policy), ("limits", self._limits, limits), ("mcp", self._mcp, mcp),
        ) if old != new]  # fmt: skip
        self.last_error = None
        if not changed:
            return False
        assert isinstance(policy, PolicySettings) and isinstance(limits, LimitSettings)
        assert isinstance(mcp, McpSettings)
        self._policy_settings, self._policy, self._limits = policy, policy.to_policy(), limits
        self._mcp = mcp
        log.info("config.reloaded: [%s] applied from %s", "] and [".join(changed), self.path)
        self._warn_unknown_tools(self._policy)
        return True

    def _reject(self, reason: str) -> bool:
        self.last_error = reason
        log.warning("config.reload_rejected: %s (keeping the last good [policy], [limits] and [mcp])", reason)
        return False

    def _warn_unknown_tools(self, policy: Policy) -> None:
        if not self._known_tools:
            return
        unknown = policy.unknown_tools(self._known_tools)
        if unknown:
            log.warning("config.unknown_tools: %s name no registered tool (ignored)", ", ".join(unknown))


def _validate(model: type[BaseModel], table: Any, prefix: str, errors: list[str]) -> BaseModel | None:
    if not isinstance(table, dict):
        errors.append(f"{prefix}: must be a table")
        return None
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        errors.extend(describe_errors(exc, prefix))
        return None


def describe_errors(exc: ValidationError, prefix: str) -> list[str]:
    """`prefix.key.path: message` for each error, e.g. `policy.sub.write: Input should be …`."""
    lines = []
    for err in exc.errors():
        where = ".".join([prefix, *(str(p) for p in err["loc"])])
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return lines


def describe_policy(policy: PolicySettings, known_tools: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(lines of the policy in effect, warnings) for `roost doctor`."""
    engine = policy.to_policy()
    known = list(known_tools)
    warnings = [f"{key} names no registered tool" for key in engine.unknown_tools(known)] if known else []
    return engine.describe(), warnings


def tool_call_cap(limits: LimitSettings, ctx: ToolContext) -> int:
    """Tool calls a run may make (0 = unlimited): the owner's main session is exempt while
    `[limits] owner_exempt` holds; every sub scope is capped."""
    if ctx.scope is Scope.MAIN and limits.owner_exempt:
        return 0
    return limits.tool_calls_per_run
