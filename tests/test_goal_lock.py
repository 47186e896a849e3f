"""Goal lock over the wire: the goal and constraints reach every request verbatim, in the
volatile tail (the cached prefix stays byte-identical), after the history is cut down (the
stand-in for compaction) and after a restart; the model changes them only with set_goal and
a reason, and the user is told."""

from __future__ import annotations

import dataclasses
import json

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, context_tail, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)

GOAL = "Move the blog from WordPress to Hugo, keeping every post's URL."
CONSTRAINTS = ["never delete the old WordPress database", "ask before changing DNS"]
STEPS = [{"title": "export posts", "done_when": "an export file exists"}]


def pinned(request_json: dict) -> str:
    return context_tail(request_json)


async def test_goal_and_constraints_reach_the_request_verbatim_after_history_cut_and_restart(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(ToolUse("plan", {"action": "create", "steps": STEPS, "goal": GOAL, "constraints": CONSTRAINTS})),
        reply_text("Plan made; starting with the export."),
        reply_text("x" * 3000),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "please move my blog to hugo")
        await h.says(OWNER, "Plan made; starting with the export.")
        # Force the history to be cut down to the newest message (what compaction will do).
        agent = h.app.agent
        agent.config = dataclasses.replace(agent.config, history_budget_chars=200)
        tg.send_private(OWNER, "how is it going?")
        await fake_api.await_requests(3)
        await h.app.conversations.lanes.drain()
        cut = fake_api.requests[2].json
        assert "please move my blog" not in json.dumps(cut["messages"]), "the history was not cut"
        assert GOAL in pinned(cut) and all(c in pinned(cut) for c in CONSTRAINTS)

    fake_api.script(reply_text("Still on the export."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "continue")
        await h.says(OWNER, "Still on the export.")
        after = fake_api.requests[-1].json
        assert GOAL in pinned(after)
        assert "- never delete the old WordPress database\n- ask before changing DNS" in pinned(after)
        prefixes = {json.dumps(r.json["system"][0], sort_keys=True) for r in fake_api.requests}
        assert len(prefixes) == 1, "pinning the goal changed the cached prefix"


async def test_goal_changes_only_with_a_reason_and_the_user_is_told(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    new_goal = "Move the blog to Hugo; old URLs may redirect."
    fake_api.script(
        reply_tools(ToolUse("plan", {"action": "create", "steps": STEPS, "goal": GOAL})),
        reply_tools(ToolUse("plan", {"action": "create", "steps": STEPS, "goal": new_goal})),  # silently: refused
        reply_tools(ToolUse("plan", {"action": "set_goal", "goal": new_goal})),  # no reason: refused
        reply_tools(ToolUse("plan", {"action": "set_goal", "goal": new_goal, "reason": "you said redirects are fine"})),
        reply_text("Goal updated."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "move my blog")
        await h.says(OWNER, f"🎯 Goal changed: {new_goal}\nWhy: you said redirects are fine")
        await h.bot_text(OWNER, lambda t: t.startswith("Goal updated."))
        requests = fake_api.requests
        refused = [b for b in user_blocks(requests[2].json) if b.get("type") == "tool_result"]
        assert refused[0].get("is_error") and "A goal is already locked" in str(refused[0]["content"])
        assert "needs a reason" in str(user_blocks(requests[3].json))
        assert GOAL in pinned(requests[3].json) and new_goal in pinned(requests[4].json)
        lock = await h.app.storage.goal_lock("main")
        assert lock is not None and lock.goal == new_goal and lock.reason == "you said redirects are fine"
