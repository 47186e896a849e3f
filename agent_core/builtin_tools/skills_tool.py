"""The `load_skill` tool (READ): returns a skill's instructions on demand.

A skill is read only if its SKILL.md passes the same confinement as read_file (a symlink from
skills/ to a private note, or a hard link, is refused), off the event loop."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from agent_core.builtin_tools._paths import access_of, resolve_in_workspace
from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError, cap_output
from workspace.access import readable
from workspace.skills import find_skill, list_skills, load_skill_body


class LoadSkillInput(BaseModel):
    name: str = Field(min_length=1, description="Skill name as shown in the skills list.")


def _load(ctx: ToolContext, name: str) -> str:
    access = access_of(ctx)
    skill = find_skill(ctx.workspace, name)
    if skill is None or not readable(ctx.workspace, skill.path, access):
        skills = [s for s in list_skills(ctx.workspace) if readable(ctx.workspace, s.path, access)]
        known = ", ".join(s.name for s in skills) or "none"
        raise ToolError(f"no skill named {name!r} (available: {known})")
    resolve_in_workspace(ctx, skill.path.as_posix(), "read")  # again, just before reading
    try:
        body = load_skill_body(ctx.workspace, skill)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__  # str(exc) would name the absolute path
        raise ToolError(f"skill {name!r} could not be read: {reason}") from None
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
