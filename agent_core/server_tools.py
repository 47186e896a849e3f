"""Server tools: tools the Messages API itself runs (today: web search), offered per scope.

Roost never sees a server tool's call before it runs — the service searches and returns the
`server_tool_use` and `web_search_tool_result` blocks in the same answer — so the policy
engine decides at *offer* time: the tool is in a request only when `ROOST_AGENT__WEB_SEARCH`
is on and the policy's verdict for `web_search` (risk class `read`) in that scope and session
is `allow`. `ask` cannot be honoured (nobody can be asked mid-answer) and so, like `deny`,
means the tool is not offered. The result blocks are stored and sent back unchanged (their
`encrypted_content` is the service's; Roost adds no text to them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_core.policy import Policy
from agent_core.risk import Risk, Scope, Verdict

WEB_SEARCH = "web_search"
WEB_SEARCH_TYPE = "web_search_20250305"
"""The version every model with web search accepts (SDK 2.14: WebSearchTool20250305Param).
The newer 20260209/20260318 versions add dynamic filtering through the code execution tool,
which Roost does not offer."""
WEB_SEARCH_MAX_USES = 5
"""Searches per request: bounds the cost of one model call."""
WEB_SEARCH_USD_PER_SEARCH = 0.01
"""$10 per 1,000 searches, on top of tokens. Source: the web search tool's pricing section,
https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-search-tool (2026-11)."""
SERVER_BLOCK_TYPES = frozenset({"server_tool_use", "web_search_tool_result"})


def web_search_tool() -> dict[str, Any]:
    return {"type": WEB_SEARCH_TYPE, "name": WEB_SEARCH, "max_uses": WEB_SEARCH_MAX_USES}


def server_tools(policy: Policy, scope: Scope, session_key: str, *, web_search: bool) -> list[dict[str, Any]]:
    """The server tools offered to this session's requests (see the module docstring)."""
    if not web_search:
        return []
    if policy.decide(scope, session_key, WEB_SEARCH, Risk.READ).verdict is not Verdict.ALLOW:
        return []
    return [web_search_tool()]


ServerToolSource = Callable[[Scope, str], list[dict[str, Any]]]
"""(scope, session key) → server tool definitions, read on every run (the policy is live)."""
