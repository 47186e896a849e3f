"""`find_tools`: with many tools (MCP servers), their schemas are not all sent every turn;
the model searches them by words and the matches are offered for the rest of the run."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from agent_core.risk import Risk, Scope
from agent_core.tools import Tool, ToolContext, ToolRegistry

MAX_LOADED = 5
_WORD = re.compile(r"[a-z0-9]+")


class FindToolsInput(BaseModel):
    query: str = Field(min_length=1, max_length=200, description="Words describing the tool you need.")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def make_find_tools_tool(registry: ToolRegistry) -> Tool[FindToolsInput]:
    async def find(args: FindToolsInput, ctx: ToolContext) -> str:
        wanted = _words(args.query)
        scored = []
        for tool in registry.deferred(ctx.scope, ctx.session_key):
            score = len(wanted & _words(tool.name)) * 2 + len(wanted & _words(tool.description))
            if score:
                scored.append((-score, tool.name, tool))
        scored.sort(key=lambda item: item[:2])
        found = [tool for _, _, tool in scored[:MAX_LOADED]]
        if not found:
            return f"No tool matches {args.query!r}. Try other words."
        ctx.loaded.update(t.name for t in found)
        lines = [f"- {t.name}: {t.description.splitlines()[0][:200]}" for t in found]
        return "Loaded for the rest of this task (call them directly now):\n" + "\n".join(lines)

    def offered(scope: Scope, session_key: str) -> bool:
        return bool(registry.deferred(scope, session_key))

    return Tool(
        name="find_tools",
        description=(
            "Search the tools whose definitions are not shown yet (tools of connected MCP servers) "
            "by words; the best matches become callable for the rest of this task."
        ),
        input_model=FindToolsInput,
        risk=Risk.READ,
        func=find,
        offered_to=offered,
    )
