"""Plans over the wire (strict fake Messages API → real app → fake Bot API): the progress line
is shown and updated by the reply's paced edits; an advance without evidence is a correction,
three in a row end the run with a clear error; abort tells the user what was and was not
done; a completed plan ends with the summary; /plan shows it; the prompt prefix stays
byte-stable while the pinned plan changes."""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, ToolUse, context_tail, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, Harness, running, tg  # noqa: F401  (fixture)

STEPS = [
    {"title": "check the services", "done_when": "all three statuses are known"},
    {"title": "restart web", "done_when": "status is active"},
    {"title": "write the summary", "done_when": "the summary is written"},
]
GOAL = "Check db, web and cache; restart the failed ones; summarise."


class Gated:
    """Answers in order, each only once the test opened its gate: the test sees what the chat
    shows between two model turns without racing the paced edits."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.gates = [threading.Event() for _ in replies]
        self.gates[0].set()
        self.served = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            index = self.served
            self.served += 1
        if not self.gates[index].wait(30):
            raise TimeoutError(f"gate {index} never opened")
        return self.replies[index]

    def open(self, index: int) -> None:
        self.gates[index].set()


def plan(action: str, **fields: Any) -> ToolUse:
    return ToolUse("plan", {"action": action, **fields})


def tool_results(request_json: dict[str, Any]) -> list[dict[str, Any]]:
    last = request_json["messages"][-1]
    return [b for b in last["content"] if b.get("type") == "tool_result"]


def shown(h: Harness, needle: str) -> bool:
    """Whether any bot message in the owner's chat showed `needle`, now or before an edit."""
    for message in h.tg.bot_messages(OWNER):
        texts = [message.text or "", *(e.text or "" for e in message.edits)]
        if any(needle in t for t in texts):
            return True
    return False


async def test_three_step_plan_shows_progress_corrects_a_claim_without_evidence_and_ends_with_summary(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    summary = "db and cache were fine; web was down and is active again after a restart."
    gated = Gated(
        reply_tools(plan("create", steps=STEPS, goal=GOAL, constraints=["never restart db"])),
        reply_tools(plan("next")),  # no goal_check: a correction, not an advance
        reply_tools(plan("next", goal_check="systemctl: db active, web failed, cache active")),
        reply_tools(plan("next", goal_check="systemctl is-active web printed active")),
        reply_tools(plan("next", goal_check="the summary below states every result")),
        reply_text(summary),
    )
    fake_api.responder = gated
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "check the three services, restart the failed ones, write me a summary")
        await tg.await_for(lambda: shown(h, "📋 step 1/3: check the services (done when: all three statuses are known)"), 20)
        gated.open(1)
        (correction,) = tool_results((await fake_api.await_requests(3, 20))[2].json)
        assert correction.get("is_error") is True
        assert "Not advanced (correction 1/3)" in str(correction["content"])
        assert shown(h, "📋 step 1/3")
        gated.open(2)
        # Step 2 is shown before the next answer may end it: with both released at once it can
        # last less than one edit interval and never reach the chat.
        await tg.await_for(lambda: shown(h, "📋 step 2/3: restart web (done when: status is active)"), 20)
        gated.open(3)
        gated.open(4)
        gated.open(5)
        await h.says(OWNER, summary)  # the final message is exactly the summary; status lines gone

        requests = fake_api.requests
        # Each request pins the goal and the current step after the cached prefix.
        pinned = [context_tail(r.json) for r in requests]
        assert all(GOAL in p and "never restart db" in p for p in pinned[1:])
        assert "Current step 2/3: restart web" in pinned[3]
        prefixes = {json.dumps(r.json["system"][0], sort_keys=True) for r in requests}
        assert len(prefixes) == 1, "the cached system prefix changed while the plan moved"

        tg.send_private(OWNER, "/plan")
        card = await h.bot_text(OWNER, lambda t: t.startswith("Goal:"))
        assert "Plan (complete):" in (card.text or "")
        assert "✓ 2. restart web (done when: status is active)" in (card.text or "")
        assert "evidence: systemctl is-active web printed active" in (card.text or "")


async def test_three_advances_without_evidence_end_the_run_with_a_clear_error(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(plan("create", steps=STEPS[:2])),
        reply_tools(plan("next", goal_check="")),
        reply_tools(plan("next", goal_check="done")),
        reply_tools(plan("next")),
        reply_text("this turn must never be asked for"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "do the two things")
        failed = await h.bot_text(OWNER, lambda t: "Stopped: I tried to mark step 1/2" in t)
        assert "3 times without stating evidence" in (failed.text or "")
        assert "Steps done: 0 of 2" in (failed.text or "")
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 4
        latest = await h.app.storage.latest_plan("main")
        assert latest is not None and latest.state == "failed"


async def test_abort_tells_the_user_what_was_done_what_was_not_and_why(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(plan("create", steps=STEPS)),
        reply_tools(plan("abort", done="checked db and cache", not_done="web was not restarted",
                         why="I have no permission to restart services here")),  # fmt: skip
        reply_text("this turn must never be asked for"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "restart what failed")
        await h.says(OWNER, (  # the whole final message: the honest account, nothing else
            "⛔ I stopped this task.\nDone: checked db and cache\nNot done: web was not restarted\n"
            "Why: I have no permission to restart services here"
        ))
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2
        latest = await h.app.storage.latest_plan("main")
        assert latest is not None and latest.state == "aborted"
