"""The terminal shows the same plan and worker progress lines the chats show."""

from __future__ import annotations

import io

from adapters.console import ConsoleAdapter
from agent_core.events import PlanProgress, WorkersChanged
from agent_core.inbound import ReplyTarget


async def test_the_terminal_shows_plan_progress_and_running_workers() -> None:
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=out)
    reply = console.open_reply(ReplyTarget("console", "console"))
    await reply.handle(PlanProgress("p1", 2, 4, "restart web", "status is active"))
    await reply.handle(WorkersChanged(running=2, finished=0))
    await reply.handle(PlanProgress("p1", 1, 1, "x\x1b[8m", "y"))
    shown = out.getvalue()
    assert "step 2/4: restart web (done when: status is active)" in shown
    assert "2 workers running" in shown
    # A plan title from the model is escaped like every other line a model can shape.
    assert "\x1b" not in shown and "x\\x1b[8m" in shown
