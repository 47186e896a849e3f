"""The `[policy]` table of roost.toml: who may run which tools where. Hot-reloaded.

```toml
[policy.main]                 # the owner's private main session (defaults shown)
read = "allow"
write = "allow"
exec = "ask"
tools = { web_fetch = "ask" } # per-tool override in main

[policy.sub]                  # every group and paired user's chat (defaults shown)
read = "allow"
write = "deny"
exec = "deny"                 # must stay "deny": exec is enabled per group only
tools = { web_fetch = "deny" }  # a named tool denied in every group and paired chat

[policy.groups."telegram:-1001234567890"]   # one chat (all its topics); or a session key
tools = { web_fetch = "allow" }             # such as "group:telegram:-100123:7"
roots = ["shared/work"]       # workspace folders shared with this chat
exec = "ask"                  # exec enabled here, and always asked of an approver
mcp = ["notes"]               # MCP servers ([mcp.servers.notes]) this chat gets
```

Verdicts are "allow", "ask" or "deny". A group entry may set `read`, `write`, `exec`,
`tools`, `roots` and `mcp`; what it leaves out comes from `[policy.sub]`. Tool names that are not
registered are warnings (logged on load, shown by `roost doctor`), not errors: a policy may
name a tool of another version. Everything else that is wrong is an error naming the key.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_core.policy import GroupRules, Policy, Rules
from agent_core.risk import Risk, Verdict
from workspace.access import check_extra_root

VerdictName = Literal["allow", "ask", "deny"]

_GROUP_KEY = re.compile(r"^((group|dm):)?[a-z]+:-?[\w.-]+(:[\w.-]+)?$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class _Rules(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: dict[str, VerdictName] = {}

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, tools: dict[str, VerdictName]) -> dict[str, VerdictName]:
        for name in tools:
            if not _TOOL_NAME.match(name):
                raise ValueError(f"{name!r} is not a tool name")
        return tools

    def _risks(self) -> dict[Risk, Verdict]:
        return {
            risk: Verdict(value)
            for risk in Risk
            if (value := getattr(self, risk.value)) is not None
        }

    def _tools(self) -> dict[str, Verdict]:
        return {name: Verdict(v) for name, v in self.tools.items()}


class MainPolicy(_Rules):
    read: VerdictName = "allow"
    write: VerdictName = "allow"
    exec: VerdictName = "ask"


class SubPolicy(_Rules):
    read: VerdictName = "allow"
    write: VerdictName = "deny"
    exec: VerdictName = "deny"

    @field_validator("exec")
    @classmethod
    def _exec_per_group_only(cls, value: str) -> str:
        if value != "deny":
            raise ValueError('exec is enabled per group only (policy.groups."<chat>".exec = "ask")')
        return value

    @field_validator("tools")
    @classmethod
    def _no_exec_tool(cls, tools: dict[str, VerdictName]) -> dict[str, VerdictName]:
        if tools.get("exec", "deny") != "deny":
            raise ValueError('exec is enabled per group only (policy.groups."<chat>".tools.exec = "ask")')
        return tools


class GroupPolicy(_Rules):
    read: VerdictName | None = None
    write: VerdictName | None = None
    exec: VerdictName | None = None
    roots: list[str] = []
    mcp: list[str] = []

    @field_validator("exec")
    @classmethod
    def _exec_is_asked(cls, value: str | None) -> str | None:
        if value == "allow":
            raise ValueError('exec in a group is always asked of an approver: use "ask" or "deny"')
        return value

    @field_validator("tools")
    @classmethod
    def _exec_tool_is_asked(cls, tools: dict[str, VerdictName]) -> dict[str, VerdictName]:
        if tools.get("exec") == "allow":
            raise ValueError('exec in a group is always asked of an approver: use "ask" or "deny"')
        return tools

    @field_validator("roots")
    @classmethod
    def _relative_roots(cls, roots: list[str]) -> list[str]:
        # The same rule the file tools apply, so a root they would ignore is refused at load.
        return [str(check_extra_root(root)) for root in roots]


class PolicySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    main: MainPolicy = MainPolicy()
    sub: SubPolicy = SubPolicy()
    groups: dict[str, GroupPolicy] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _group_keys(self) -> PolicySettings:
        for key in self.groups:
            if not _GROUP_KEY.match(key):
                raise ValueError(
                    f"policy.groups key {key!r} is not a chat like 'telegram:-100123' or a "
                    "session key like 'group:telegram:-100123:7'"
                )
        return self

    def to_policy(self) -> Policy:
        """The engine's immutable form."""
        return Policy(
            main=Rules(MappingProxyType(self.main._risks()), MappingProxyType(self.main._tools())),
            sub=Rules(MappingProxyType(self.sub._risks()), MappingProxyType(self.sub._tools())),
            groups=MappingProxyType(
                {
                    key: GroupRules(
                        MappingProxyType(group._risks()),
                        MappingProxyType(group._tools()),
                        tuple(group.roots),
                        tuple(group.mcp),
                    )
                    for key, group in self.groups.items()
                }
            ),
        )
