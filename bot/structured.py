"""Structured execution in the chat: `/plan`, `ask:` buttons, and continuing a run a restart
cut off while it waited for an answer (the pending ask_user tool_use gets the answer as its
tool_result in the stored transcript, then a run continues from there)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.base import ButtonAnswer
from agent_core.inbound import Inbound
from agent_core.questions import PREFIX as QUESTION_PREFIX
from agent_core.questions import Question, answer_result
from agent_core.transcript import INTERRUPTED_RESULT
from bot.operations.actor import Actor
from bot.pending import Pending
from bot.router import Accept
from bot.session_keys import origin_of, scope_of

if TYPE_CHECKING:
    from bot.registry import ChatHost

__all__ = ["QUESTION_PREFIX", "answer_into_transcript", "plan_command", "press_question", "resumed_pending"]

log = logging.getLogger(__name__)

RESUMED_NOTE = "(My answer to your question is above; Roost restarted while you were waiting. Please continue.)"


def answer_text(question: Question, answer: str) -> str:
    return f"(Roost restarted while you waited.) My answer to your question “{question.text}”: {answer}"


async def plan_command(c: ChatHost, session_key: str, actor: Actor) -> str:
    plan, lock = await c.operations.plan_state(actor, session_key)
    parts = []
    if lock is not None:
        parts.append(lock.pinned().replace(" (locked; change it only with the plan tool's set_goal and a reason)", ""))
    if plan is not None:
        parts.append(plan.describe())
    return "\n\n".join(parts) if parts else "No plan in this chat yet. Ask me for a multi-step task."


async def end_with_session(c: ChatHost, session_key: str, actor: Actor) -> None:
    """/new: the goal lock, the active plan and a question left pending (e.g. by a restart)
    belong to the conversation that ended."""
    await c.operations.end_conversation(actor, session_key)
    if c.plans is not None:
        c.plans.forget(session_key)
    if c.log_cutoffs is not None:  # the new conversation holds none of today's log
        c.log_cutoffs.forget(session_key)


async def press_question(c: ChatHost, action: str, identity: str) -> ButtonAnswer:
    """An `ask:<id>:<n>` button: only the addressee's press answers."""
    if c.questions is None:
        return ButtonAnswer("This button is no longer active.", done=False)
    done, text = await c.questions.press(action, identity)
    return ButtonAnswer(text, done=done)


async def answer_into_transcript(c: ChatHost, question: Question, answer: str, identity: str) -> bool:
    """After a restart: store the answer as the tool_result of the pending ask_user call (and
    an interrupted result for any call beside it), so the next run continues the task. False
    when the call was already closed (a stop wrote its results): the answer then travels as
    the next run's text."""
    transcript = await c.storage.load_transcript(question.session_key)
    last = transcript[-1] if transcript else None
    if last is None or last["role"] != "assistant":
        log.info("question.resume_without_pending_call", extra={"question": question.id})
        return False
    results = []
    for block in last["content"]:
        if block.get("type") != "tool_use":
            continue
        content = (
            answer_result(identity, answer, scope_of(question.session_key))
            if block.get("name") == "ask_user"
            else INTERRUPTED_RESULT
        )
        results.append({"type": "tool_result", "tool_use_id": block["id"], "content": content})
    if results:
        await c.storage.append_message(question.session_key, question.run_id, "user", results)
    return bool(results)


async def resumed_pending(c: ChatHost, question: Question, identity: str, text: str) -> Pending | None:
    """The lane item that continues a question's session after a restart (its chat is the
    session's; `text` says why the run continues)."""
    session = await c.storage.get_session(question.session_key)
    if session is None or session.platform is None or session.chat_id is None or session.platform not in c.adapters:
        return None
    # An isolated job's key ends in ":job-<id>", which is not a thread: use its chat's key.
    parts = origin_of(question.session_key).split(":")
    thread = parts[3] if question.session_key.startswith("group:") and len(parts) > 3 else None
    kind = "group" if question.session_key.startswith("group:") else "private"
    inbound = Inbound(session.platform, kind, session.chat_id, identity.partition(":")[2], identity, text,
                      thread_id=thread)  # fmt: skip
    route = Accept(question.session_key, scope_of(question.session_key), c.router.is_owner_identity(identity))
    return Pending(inbound, route)
