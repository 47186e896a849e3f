"""The policy engine: scope × risk class × tool → allow / ask / deny, decided in code.

Nothing the model reads or writes reaches this module: the policy comes from configuration
(`bot.policy_settings`, hot-reloaded) and grants come from an approver's button press.

Precedence for one call (later wins, then the exec clamp):

1. the scope's default for the tool's risk class (`main` or `sub`);
2. the scope's per-tool override;
3. in a sub scope, the matching group's risk-class override, then its per-tool override;
   an MCP server's tool (`mcp__<server>__<tool>`) is denied in a sub scope whose group
   entry does not list the server in `mcp` (servers are the main session's by default);
4. exec clamp: in a sub scope a tool of risk `exec` runs only where a *group* entry enabled
   it, and then is always asked of an approver — `allow` becomes `ask`, and no grant turns
   it into `allow`.

Grants ("Always allow in this session") are rules for one session, one tool and one exact
normalised input (`grant_input`), and for a command running workspace code the content that
code had (`agent_core.grant_binding`); they only ever turn an `ask` into `allow`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from agent_core.risk import DEFAULT_POLICY, Risk, Scope, Verdict


@dataclass(frozen=True, slots=True)
class Rules:
    """Overrides at one level: per risk class and per tool name (both may be partial)."""

    risks: Mapping[Risk, Verdict] = field(default_factory=lambda: MappingProxyType({}))
    tools: Mapping[str, Verdict] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class GroupRules(Rules):
    roots: tuple[str, ...] = ()
    """Workspace-relative folders the owner shared with this chat."""
    mcp: tuple[str, ...] = ()
    """MCP servers whose tools this chat gets (under its read/write/exec rules)."""


MCP_PREFIX = "mcp__"


def mcp_server_of(tool: str) -> str | None:
    """The server of an MCP tool name `mcp__<server>__<tool>`, else None."""
    if not tool.startswith(MCP_PREFIX):
        return None
    server, sep, _ = tool[len(MCP_PREFIX) :].partition("__")
    return server if sep and server else None


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    verdict: Verdict
    source: str
    """The configuration key that decided, e.g. "policy.groups.telegram:-100.tools.web_fetch"."""


def _default_rules(scope: Scope) -> Rules:
    return Rules(risks=MappingProxyType(dict(DEFAULT_POLICY[scope])))


@dataclass(frozen=True, slots=True)
class Policy:
    main: Rules = field(default_factory=lambda: _default_rules(Scope.MAIN))
    sub: Rules = field(default_factory=lambda: _default_rules(Scope.SUB))
    groups: Mapping[str, GroupRules] = field(default_factory=lambda: MappingProxyType({}))
    """Keyed by a session key ("group:telegram:-100:7", "dm:telegram:42") or a chat
    ("telegram:-100", which also covers that chat's topics)."""

    def group_for(self, session_key: str) -> tuple[str, GroupRules] | None:
        """The most specific group entry for a session: the exact key, then the chat
        without its topic, then "platform:chat"."""
        for key in _candidate_keys(session_key):
            rules = self.groups.get(key)
            if rules is not None:
                return key, rules
        return None

    def roots_for(self, scope: Scope, session_key: str) -> tuple[str, ...]:
        if scope is Scope.MAIN:
            return ()
        found = self.group_for(session_key)
        return found[1].roots if found else ()

    def decide(self, scope: Scope, session_key: str, tool: str, risk: Risk) -> PolicyDecision:
        base = self.main if scope is Scope.MAIN else self.sub
        prefix = f"policy.{scope.value}"
        verdict = base.risks.get(risk, DEFAULT_POLICY[scope][risk])
        source = f"{prefix}.{risk.value}"
        if tool in base.tools:
            verdict, source = base.tools[tool], f"{prefix}.tools.{tool}"
        from_group = False
        server = mcp_server_of(tool)
        if server is not None and not self.mcp_offered(scope, session_key, server):
            found = self.group_for(session_key)
            where = f"policy.groups.{found[0]}.mcp" if found else "policy.sub.mcp"
            return PolicyDecision(Verdict.DENY, where)
        if scope is Scope.SUB:
            found = self.group_for(session_key)
            if found is not None:
                key, group = found
                if risk in group.risks:
                    verdict, source, from_group = group.risks[risk], f"policy.groups.{key}.{risk.value}", True
                if tool in group.tools:
                    verdict, source, from_group = group.tools[tool], f"policy.groups.{key}.tools.{tool}", True
            if risk is Risk.EXEC:
                if not from_group:
                    # Only the owner enables exec, one group at a time.
                    verdict = Verdict.DENY
                elif verdict is Verdict.ALLOW:
                    verdict = Verdict.ASK
        return PolicyDecision(verdict, source)

    def mcp_offered(self, scope: Scope, session_key: str, server: str) -> bool:
        """Whether a run of (scope, session) may use MCP server `server`: main always; a sub
        scope only when its group entry lists the server."""
        if scope is Scope.MAIN:
            return True
        found = self.group_for(session_key)
        return found is not None and server in found[1].mcp

    def grant_may_apply(self, scope: Scope, risk: Risk) -> bool:
        """Whether a stored grant may turn `ask` into `allow` (never for exec in sub scopes)."""
        return not (scope is Scope.SUB and risk is Risk.EXEC)

    def tool_names(self) -> set[str]:
        names = set(self.main.tools) | set(self.sub.tools)
        for group in self.groups.values():
            names |= set(group.tools)
        return names

    def unknown_tools(self, known: Iterable[str]) -> list[str]:
        """Configuration keys naming a tool that is not registered (a typo, or a tool of
        another version): warned about, never fatal."""
        known_set = {*known, *(t for t in self.tool_names() if t.startswith(MCP_PREFIX))}  # they come and go
        keys = [f"policy.main.tools.{t}" for t in self.main.tools if t not in known_set]
        keys += [f"policy.sub.tools.{t}" for t in self.sub.tools if t not in known_set]
        for name, group in self.groups.items():
            keys += [f"policy.groups.{name}.tools.{t}" for t in group.tools if t not in known_set]
        return keys

    def describe(self) -> list[str]:
        """One line per level, for `roost doctor`."""
        lines = [f"{scope.value}: {_rules_text(rules)}" for scope, rules in ((Scope.MAIN, self.main), (Scope.SUB, self.sub))]
        for name, group in sorted(self.groups.items()):
            text = _rules_text(group)
            if group.roots:
                text = f"{text}; roots {', '.join(group.roots)}" if text else f"roots {', '.join(group.roots)}"
            if group.mcp:
                text = f"{text}; mcp {', '.join(group.mcp)}" if text else f"mcp {', '.join(group.mcp)}"
            lines.append(f"group {name}: {text or 'as sub'}")
        return lines


def _rules_text(rules: Rules) -> str:
    parts = [f"{risk.value} {rules.risks[risk].value}" for risk in Risk if risk in rules.risks]
    parts += [f"{name} {verdict.value}" for name, verdict in sorted(rules.tools.items())]
    return ", ".join(parts)


def _candidate_keys(session_key: str) -> list[str]:
    parts = session_key.split(":")
    keys = [session_key]
    if len(parts) >= 3 and parts[0] in ("group", "dm"):
        chat_key = ":".join(parts[:3])
        if chat_key != session_key:
            keys.append(chat_key)
        keys.append(":".join(parts[1:3]))
    return keys


DEFAULT = Policy()


# -- grants ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrantRule:
    """"Always allow" for one session, one tool and one exact normalised input; for a
    command that runs workspace code, also bound to its content (`binding`, see
    `agent_core.grant_binding`): it holds only while that is unchanged."""

    session_key: str
    tool_name: str
    input: str
    binding: str = ""


@dataclass(frozen=True, slots=True)
class Grant:
    id: int
    rule: GrantRule
    created_at: datetime
    created_by: str | None = None


def grant_input(tool_name: str, parsed: BaseModel) -> str:
    """The exact input a grant covers: for exec the command line byte for byte (no
    stripping, no whitespace folding — `echo  x` is another command than `echo x`); for
    other tools the canonical JSON of the validated input."""
    if tool_name == "exec":
        command = getattr(parsed, "command", None)
        if isinstance(command, str):
            return command
    return canonical_json(parsed.model_dump(mode="json"))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
