"""The `ask_user` tool: pause the run until the user answers (buttons when there are options)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_core.questions import QuestionDesk
from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext

WAIT_S = 7 * 24 * 3600.0
"""How long a question may wait; /stop or /new end it sooner."""


class AskInput(BaseModel):
    question: str = Field(description="One clear question for the user.")
    options: list[str] = Field(
        default_factory=list, max_length=8, description="Short answers offered as buttons (optional)."
    )


def make_ask_user_tool(desk: QuestionDesk) -> Tool[AskInput]:
    async def ask_user(args: AskInput, ctx: ToolContext) -> str:
        return await desk.ask(ctx, args.question, args.options)

    return Tool(
        name="ask_user",
        description=(
            "Ask the user a question when you need information or a decision only they have; "
            "the task pauses until they answer, and the answer is this tool's result. Offer "
            "options when the answer is one of a few choices."
        ),
        input_model=AskInput,
        risk=Risk.READ,
        func=ask_user,
        timeout_s=WAIT_S,
        describe_action=lambda a: f"ask_user: {a.question}",
    )
