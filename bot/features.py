"""The chat features Roost runs with, plugged into one `bot.registry.Registry`: the only
module that names them all (bot.app hands the registry to Conversations)."""

from __future__ import annotations

from agent_core.inbound import Inbound
from bot import queue_modes, resume, structured
from bot.commands import Command
from bot.registry import ChatHost, Registry
from bot.operations.actor import chat_actor
from bot.router import Accept
from bot.scheduling import chat as job_chat


async def _jobs(c: ChatHost, command: Command, inbound: Inbound, route: Accept) -> str:
    return await job_chat.jobs_command(c, inbound, route)


async def _plan(c: ChatHost, command: Command, inbound: Inbound, route: Accept) -> str:
    actor = chat_actor(inbound.identity, is_owner=route.is_owner)
    return await structured.plan_command(c, route.session_key, actor)


def chat_registry() -> Registry:
    registry = Registry()
    registry.command("jobs", _jobs)
    registry.command("queue", queue_modes.queue_command)
    registry.command("plan", _plan)
    registry.button(resume.PREFIX, resume.press)
    registry.button(structured.QUESTION_PREFIX, structured.press_question)
    registry.button(job_chat.PREFIX, job_chat.press)
    registry.on_session_end(structured.end_with_session)  # goal lock, plan, a pending question
    return registry
