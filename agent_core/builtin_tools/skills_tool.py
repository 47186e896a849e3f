"""The `load_skill` tool (READ): returns a skill's instructions on demand."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError, cap_output
from workspace.skills import find_skill, list_skills, load_skill_body


class LoadSkillInput(BaseModel):
    name: str = Field(min_length=1, description="Skill name as shown in the skills list.")


def _load(ctx: ToolContext, name: str) -> str:
    skill = find_skill(ctx.workspace, name)
    if skill is None:
        known = ", ".join(s.name for s in list_skills(ctx.workspace)) or "none"
        raise ToolError(f"no skill named {name!r} (available: {known})")
    try:
        body = load_skill_body(ctx.workspace, skill)
    except OSError as exc:
        raise ToolError(f"skill {name!r} could not be read: {exc}") from exc
    return cap_output(f"# Skill: {skill.name} ({skill.path.as_posix()})\n\n{body}")


async def _run(args: LoadSkillInput, ctx: ToolContext) -> str:
    return await asyncio.to_thread(_load, ctx, args.name.strip())


LOAD_SKILL: Tool[LoadSkillInput] = Tool(
    "load_skill",
    "Load the full instructions of a skill from the skills list before using it.",
    LoadSkillInput,
    Risk.READ,
    _run,
)
