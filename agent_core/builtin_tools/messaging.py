"""The `send_message` tool (WRITE): send a message to this session's chat via the Messenger.

Never reports a false "sent": no messenger, or a messenger that raises, is a ToolError.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError

MAX_MESSAGE_CHARS = 20_000


class SendMessageInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="Message text.")


async def _send(args: SendMessageInput, ctx: ToolContext) -> str:
    if ctx.messenger is None:
        raise ToolError("message not sent: no chat is connected to this session")
    try:
        confirmation = await ctx.messenger.send(args.text)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the platform's reason goes to the model, verbatim
        raise ToolError(f"message not sent: {type(exc).__name__}: {exc}") from exc
    return f"sent ({confirmation})" if confirmation else "sent"


SEND_MESSAGE: Tool[SendMessageInput] = Tool(
    "send_message",
    "Send a separate message to this chat now (e.g. a progress note or a reminder). Your "
    "final answer is delivered anyway; do not repeat it here.",
    SendMessageInput,
    Risk.WRITE,
    _send,
    describe_action=lambda a: f"send message:\n\n{a.text}",
)
