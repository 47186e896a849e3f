"""The `[mcp]` table of roost.toml: Model Context Protocol servers whose tools Roost offers.

```toml
[mcp.servers.github]            # stdio: a child process
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }   # ${VAR} from Roost's environment, at connect time
[mcp.servers.notes]             # streamable HTTP (a url ending in /sse, or sse = true: the old HTTP+SSE)
url = "http://127.0.0.1:9000/mcp"
headers = { Authorization = "Bearer ${NOTES_TOKEN}" }
tools = { include = ["search_*", "get_*"], exclude = ["delete_*"] }
risk = "read"                   # default risk class of its tools; the default is "exec"
risk_of = { create_note = "write" }
timeout_s = 60                  # a call running longer ends with an error result
enabled = true                  # false: configured but not connected
```

A stdio child gets only `env` (plus PATH, HOME and the like the SDK passes on), never
Roost's own environment. The values `${VAR}` stands for are secrets: resolved when the
server is connected, never written back into the settings, and redacted from logs, audit
rows and `roost mcp list` (`secret_values`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_core.risk import Risk

RiskName = Literal["read", "write", "exec"]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
"""No double underscore: `mcp__<server>__<tool>` must split back into its parts."""
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnresolvedVariable(ValueError):
    """A `${VAR}` whose variable is not set in Roost's environment."""


class ToolFilter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = []
    """Glob patterns of tool names offered; empty → all."""
    exclude: list[str] = []
    """Glob patterns of tool names never offered (wins over include)."""

    def admits(self, name: str) -> bool:
        if any(fnmatch.fnmatchcase(name, p) for p in self.exclude):
            return False
        return not self.include or any(fnmatch.fnmatchcase(name, p) for p in self.include)


class McpServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    sse: bool | None = None
    """The old HTTP+SSE transport; None → when the url's path ends in /sse."""
    tools: ToolFilter = ToolFilter()
    risk: RiskName = "exec"
    risk_of: dict[str, RiskName] = {}
    timeout_s: float = Field(60.0, gt=0, le=3600)
    enabled: bool = True

    @field_validator("args", "env", "headers", "command", "url", "cwd")
    @classmethod
    def _references(cls, value: object) -> object:
        texts = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else [value]
        for text in texts:
            for name in _REFERENCE.findall(text or ""):
                if not _VAR_NAME.match(name):
                    raise ValueError(f"${{{name}}} is not a variable reference like ${{GITHUB_TOKEN}}")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError('set either command (a stdio server) or url (streamable HTTP), not both')
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url must start with http:// or https://, not {self.url[:20]!r}")
            if self.args or self.env or self.cwd:
                raise ValueError("args, env and cwd are for a stdio server (command), not a url")
        elif self.headers or self.sse is not None:
            raise ValueError("headers and sse are for a url server, not a stdio command")
        return self

    @property
    def transport(self) -> str:
        if self.url is None:
            return "stdio"
        old = self.sse if self.sse is not None else self.url.split("?")[0].rstrip("/").endswith("/sse")
        return "sse" if old else "http"

    def risk_for(self, tool: str) -> Risk:
        return Risk(self.risk_of.get(tool, self.risk))

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return {k: resolve(v, environ, f"env.{k}") for k, v in self.env.items()}

    def resolved_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return {k: resolve(v, environ, f"headers.{k}") for k, v in self.headers.items()}

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """What the `${VAR}` references stand for now (set ones only): redacted everywhere."""
        environ = os.environ if environ is None else environ
        texts = [*self.args, *self.env.values(), *self.headers.values(), self.url or "", self.command or ""]
        names = {n for text in texts for n in _REFERENCE.findall(text)}
        return [environ[n] for n in sorted(names) if environ.get(n)]


class McpSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    lazy_above: int = Field(40, ge=0)
    """Above this many MCP tools in all, their schemas are not sent every turn: the model
    searches them with `find_tools`, which offers the matches for the rest of the run."""

    @field_validator("servers")
    @classmethod
    def _server_names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            if len(name) > 32 or not _SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r}: letters, digits, '-' and single '_' only, at most 32 characters"
                )
        return servers

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        return [v for server in self.servers.values() for v in server.secret_values(environ)]


def resolve(text: str, environ: Mapping[str, str] | None, where: str) -> str:
    """`text` with each `${VAR}` replaced by Roost's environment variable VAR."""
    environ = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise UnresolvedVariable(f"{where}: ${{{name}}} is not set in Roost's environment")
        return environ[name]

    return _REFERENCE.sub(one, text)
