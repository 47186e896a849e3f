"""Workers over the wire: two workers with 1-second tools run concurrently; a worker has no
more rights than the scope that spawned it (and no private context in a group); a worker that
uses up its turns, crashes, is stopped or is cut off by a restart is reported as such."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agent_core.workers import WorkerRecord
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Error, Stall, ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, OWNER, Harness, running, tg  # noqa: F401  (fixture)
from tests.test_conversations import CANARY_LOG, CANARY_MEMORY, CANARY_USER, CANARY_YESTERDAY, plant_canaries

ALLOW_EXEC = {"main": {"tools": {"exec": "allow"}}}


def worker_turn(task: str, turn: int):  # noqa: ANN201
    """Matches the `turn`-th request of the worker whose task is `task`."""

    def match(body: dict[str, Any]) -> bool:
        first = json.dumps(body["messages"][0], ensure_ascii=False)
        return f"Task: {task}" in first and len(body["messages"]) == 2 * turn - 1

    return match


def spawn(name: str, task: str, **extra: Any) -> ToolUse:
    return ToolUse("spawn", {"action": "start", "name": name, "task": task, **extra})


def shown(h: Harness, chat: int, needle: str) -> bool:
    """Whether any bot message in the chat showed `needle`, now or before an edit."""
    return any(
        needle in t for m in h.tg.bot_messages(chat) for t in [m.text or "", *(e.text or "" for e in m.edits)]
    )


def results_in(body: dict[str, Any]) -> str:
    return " ".join(str(b.get("content")) for b in user_blocks(body) if b.get("type") == "tool_result")


async def parent_result(h: Harness, fake_api: FakeAnthropic, n: int) -> str:
    """The tool results the parent's `n`-th request (1-based) carries."""
    def parent(r: Any) -> bool:
        return r.json is not None and "Task: " not in json.dumps(r.json["messages"][0], ensure_ascii=False)

    found = await fake_api.await_until(lambda rs: len([r for r in rs if parent(r)]) >= n, 15, "parent requests")
    return results_in([r for r in found if parent(r)][n - 1].json)


async def test_two_workers_with_one_second_tools_run_at_the_same_time(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    for task in ("check disk A", "check disk B"):
        fake_api.script_when(worker_turn(task, 1), reply_tools(ToolUse("exec", {"command": f"sleep 1; echo {task[-1]}-ok"})))
        fake_api.script_when(worker_turn(task, 2), reply_text(f"{task}: ok"))
    fake_api.script(
        reply_tools(spawn("disk A", "check disk A"), spawn("disk B", "check disk B")),
        reply_text("Both disks are fine."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, policy=ALLOW_EXEC) as h:
        tg.send_private(OWNER, "check both disks")
        await h.bot_text(OWNER, lambda t: t.startswith("Both disks are fine."))
        results = await parent_result(h, fake_api, 2)
        assert "(“disk A”): completed\ncheck disk A: ok" in results
        assert "(“disk B”): completed\ncheck disk B: ok" in results
        workers = await h.app.storage.worker_runs()
        assert [w.status for w in workers] == ["completed", "completed"]
        spans = [(w.finished_at - w.started_at).total_seconds() for w in workers if w.finished_at]
        assert all(s >= 1.0 for s in spans), spans  # each really ran its 1-second tool
        # Concurrent, not serial: each exec started before the other finished (their total
        # time is not asserted: load can spread the workers' first model calls apart).
        (a_start, a_end), (b_start, b_end) = await exec_spans(h)
        assert a_start < b_end and b_start < a_end, "the workers' tools did not overlap"
        assert shown(h, OWNER, "👷 2 workers running")  # the chat's status line while they ran


async def exec_spans(h: Harness) -> list[tuple[Any, Any]]:
    from sqlalchemy import text

    async with h.app.storage.engine.connect() as conn:
        rows = await conn.execute(text("SELECT started_at, finished_at FROM tool_calls WHERE name = 'exec'"))
        return [(r[0], r[1]) for r in rows]


async def test_worker_in_a_group_cannot_use_what_the_group_denies_and_sees_nothing_private(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script_when(worker_turn("list the files", 1), reply_tools(ToolUse("exec", {"command": "ls"})))
    fake_api.script_when(worker_turn("list the files", 2), reply_text("exec was denied."))
    steps = [{"title": "list the files", "done_when": "the worker reported"}]
    fake_api.script(
        reply_tools(ToolUse("plan", {"action": "create", "steps": steps}), spawn("lister", "list the files")),
        reply_text("The worker could not run exec."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        plant_canaries(h.workspace)
        tg.send_group(GROUP, MEMBER, "list the files", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("The worker could not run exec."))
        worker_requests = [r for r in fake_api.requests if "Task: list the files" in r.body.decode()]
        assert len(worker_requests) == 2
        denied = results_in(worker_requests[1].json)
        assert "Denied by policy: exec" in denied
        tools = {t["name"] for t in worker_requests[0].json["tools"]}
        assert not tools & {"spawn", "ask_user", "plan", "send_message", "schedule"}  # depth 1, no chat
        for request in fake_api.requests:
            body = request.body.decode()
            for canary in (CANARY_USER, CANARY_MEMORY, CANARY_LOG, CANARY_YESTERDAY):
                assert canary not in body, f"{canary} reached a group or worker request"
        (worker,) = await h.app.storage.worker_runs()
        assert worker.session_key.startswith("group:telegram:")
        assert await h.app.storage.active_plan(worker.session_key) is not None  # the group's own plan
        assert await h.app.storage.active_plan("main") is None


async def test_worker_out_of_turns_is_reported_as_budget_exceeded_and_a_crashed_one_as_failed(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script_when(worker_turn("loop forever", 1), reply_tools(ToolUse("plan_nothing", {})))
    # Refused, and refused again after the loop's one repaired retry: the worker's run fails.
    crash = Error(400, message="bad request from the worker")
    fake_api.script_when(worker_turn("crash", 1), crash, crash)
    fake_api.script(
        reply_tools(spawn("looper", "loop forever", max_turns=1), spawn("crasher", "crash")),
        reply_text("One ran out of turns, one failed."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "try both")
        await h.bot_text(OWNER, lambda t: t.startswith("One ran out of turns, one failed."))
        results = await parent_result(h, fake_api, 2)
        assert "(“looper”): budget_exceeded\nUsed its whole budget of 1 turns" in results
        assert "(“crasher”): failed" in results
        statuses = {w.name: w.status for w in await h.app.storage.worker_runs()}
        assert statuses == {"looper": "budget_exceeded", "crasher": "failed"}


async def test_stop_cancels_the_parent_and_its_workers(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    fake_api.script_when(worker_turn("wait forever", 1), Stall(None))
    fake_api.script(reply_tools(spawn("sleeper", "wait forever")))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "start a long one")
        await fake_api.await_until(lambda rs: any("Task: wait forever" in r.body.decode() for r in rs), 10, "worker")
        tg.send_private(OWNER, "/stop")
        await h.says(OWNER, "Stopped.")
        await h.app.conversations.lanes.drain()
        (worker,) = await h.app.storage.worker_runs()
        assert worker.status == "cancelled"
        assert h.app.conversations.workers is not None and h.app.conversations.workers.running == 0


async def test_worker_left_running_by_a_dead_process_is_reported_interrupted(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        # What a killed process leaves behind: a worker row still "running" (no task of this
        # process owns it, so nothing here closes it).
        await h.app.storage.add_worker(WorkerRecord("w1", "run-1", "main", "sleeper", "wait", started_at=datetime.now(UTC)))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        (worker,) = await h.app.storage.worker_runs()
        assert worker.status == "interrupted" and worker.result == "Interrupted by a restart before it finished."


async def test_a_workers_approval_card_names_the_worker_and_its_task(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from tests.test_telegram_approvals import cards, press

    fake_api.script_when(worker_turn("write the marker", 1), reply_tools(ToolUse("exec", {"command": "echo hi"})))
    fake_api.script_when(worker_turn("write the marker", 2), reply_text("marker written"))
    fake_api.script(reply_tools(spawn("marker", "write the marker")), reply_text("The worker wrote it."))
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "have a worker write the marker")
        (card,) = await cards(h)
        assert "Worker “marker” (task: write the marker)" in (card.text or "")
        assert "echo hi" in (card.text or "")
        await press(h, card, "✅ Approve once")
        await h.bot_text(OWNER, lambda t: t.startswith("The worker wrote it."))
        (worker,) = await h.app.storage.worker_runs()
        assert worker.status == "completed" and worker.result == "marker written"


async def test_parent_continues_and_collects_later_and_a_sixth_child_is_refused(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    for n in range(5):
        fake_api.script_when(worker_turn(f"count to {n}", 1), reply_text(f"counted to {n}"))
    fake_api.script(
        reply_tools(*(spawn(f"w{n}", f"count to {n}", wait=False) for n in range(6))),
        reply_tools(ToolUse("spawn", {"action": "wait"})),
        reply_text("All five counted."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "count in parallel")
        await h.bot_text(OWNER, lambda t: t.startswith("All five counted."))
        started = await parent_result(h, fake_api, 2)
        assert started.count("started; collect its result with action wait") == 5
        assert "Not started: a run may spawn at most 5 workers." in started
        collected = await parent_result(h, fake_api, 3)
        assert all(f"(“w{n}”): completed\ncounted to {n}" in collected for n in range(5)), collected


async def test_parent_receives_a_result_as_it_finishes_and_a_worker_left_running_is_cancelled_honestly(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script_when(worker_turn("quick sum", 1), reply_text("42"))
    fake_api.script_when(worker_turn("slow crawl", 1), Stall(None))
    fake_api.script(
        reply_tools(spawn("quick", "quick sum", wait=False), spawn("slow", "slow crawl", wait=False)),
        reply_tools(ToolUse("spawn", {"action": "wait", "first": True})),
        reply_text("The sum is 42; I stopped the crawl."),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        tg.send_private(OWNER, "sum and crawl")
        await h.bot_text(OWNER, lambda t: t.startswith("The sum is 42"))
        first = await parent_result(h, fake_api, 3)
        assert "(“quick”): completed\n42" in first and "slow" not in first
        await h.app.conversations.lanes.drain()
        statuses = {w.name: (w.status, w.result) for w in await h.app.storage.worker_runs()}
        assert statuses["quick"] == ("completed", "42")
        assert statuses["slow"] == ("cancelled", "Cancelled before it finished (the task was stopped).")


async def test_worker_limits_come_from_the_limits_table(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    for n in range(3):
        fake_api.script_when(worker_turn(f"count to {n}", 1), reply_text(f"counted to {n}"))
    fake_api.script(
        reply_tools(*(spawn(f"w{n}", f"count to {n}", wait=False) for n in range(3))),
        reply_tools(ToolUse("spawn", {"action": "wait"})),
        reply_text("Two counted."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, limits={"workers": {"per_run": 2}}) as h:
        tg.send_private(OWNER, "count in parallel")
        await h.bot_text(OWNER, lambda t: t.startswith("Two counted."))
        started = await parent_result(h, fake_api, 2)
        assert started.count("started; collect its result with action wait") == 2
        assert "Not started: a run may spawn at most 2 workers." in started


async def test_workers_cut_off_by_a_crash_are_named_in_the_resume_offer(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from bot.storage.inbox import InboxMessage

    async with running(tmp_path, tg, fake_api, paced=False) as h:
        # What kill -9 leaves behind mid-worker: the parent run "running" with its message
        # taken, and its worker still "running" (nothing of this process owns either).
        storage = h.app.storage
        inbox_id = await storage.receive_inbound(InboxMessage(
            platform="telegram", chat_kind="private", chat_id=str(OWNER), sender_id=str(OWNER),
            sender_name="Olivia", text="crawl the site", received_at=datetime.now(UTC), update_id="crash-1",
        ))
        assert inbox_id is not None
        await storage.queue_inbound(inbox_id, "main")
        await storage.take_inbound([inbox_id], "run-crashed")
        await storage.begin_run("run-crashed", "main", "claude-sonnet-4-5", [{"type": "text", "text": "crawl the site"}])
        await storage.add_worker(
            WorkerRecord("w9", "run-crashed", "main", "crawler", "crawl", started_at=datetime.now(UTC))
        )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        offer = await h.bot_text(OWNER, lambda t: t.startswith("I was restarted while working on: crawl the site"))
        assert "interrupted workers: “crawler”" in (offer.text or "")
        (worker,) = await h.app.storage.worker_runs("run-crashed")
        assert worker.status == "interrupted"


async def test_worker_in_a_group_that_denies_web_fetch_is_denied_by_the_groups_own_rule(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A worker's tool policy is its parent chat's. Only this group denies web_fetch (the sub
    scope allows it), so a worker decided under a key of its own (`worker:<id>`) would be
    allowed: the denial must name the group's rule."""
    fetch = ToolUse("web_fetch", {"url": "http://127.0.0.1:9/"})  # never leaves the machine
    fake_api.script_when(worker_turn("fetch the page", 1), reply_tools(fetch))
    fake_api.script_when(worker_turn("fetch the page", 2), reply_text("web_fetch was denied."))
    fake_api.script(reply_tools(spawn("fetcher", "fetch the page")), reply_text("The worker could not fetch."))
    policy = {"groups": {f"telegram:{GROUP}": {"tools": {"web_fetch": "deny"}}}}
    async with running(tmp_path, tg, fake_api, paced=False, policy=policy) as h:
        tg.send_group(GROUP, MEMBER, "fetch the page", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("The worker could not fetch."))
        worker_requests = [r for r in fake_api.requests if "Task: fetch the page" in r.body.decode()]
        denied = results_in(worker_requests[1].json)
        assert "Denied by policy: web_fetch" in denied
        assert f"(policy.groups.telegram:{GROUP}.tools.web_fetch)" in denied
        audited = [e for e in await h.app.storage.audit_entries(limit=None) if e.subject == "web_fetch"]
        assert [(e.decision, e.session_key, e.actor) for e in audited] == [
            ("deny", f"group:telegram:{GROUP}", f"telegram:{MEMBER}")
        ]


async def test_workers_tool_calls_count_against_the_parent_runs_cap(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Cap 3: the parent's spawn is one, the worker's first two reads make three, its next
    call is refused (a worker counting on its own would have had three more)."""
    reads = [ToolUse("read_file", {"path": f"part-{n}.md"}) for n in range(3)]
    fake_api.script_when(worker_turn("read the parts", 1), reply_tools(reads[0], reads[1]))
    fake_api.script_when(worker_turn("read the parts", 2), reply_tools(reads[2]))
    fake_api.script_when(worker_turn("read the parts", 3), reply_text("read two parts"))
    fake_api.script(reply_tools(spawn("reader", "read the parts")), reply_text("The reader stopped at the cap."))
    async with running(tmp_path, tg, fake_api, paced=False, limits={"tool_calls_per_run": 3}) as h:
        tg.send_group(GROUP, MEMBER, "read the parts", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t.startswith("The reader stopped at the cap."))
        worker_requests = [r for r in fake_api.requests if "Task: read the parts" in r.body.decode()]
        assert "reached its limit of 3 tool calls" not in results_in(worker_requests[1].json)
        assert "Not run: this run reached its limit of 3 tool calls" in results_in(worker_requests[2].json)


# --- a grant bound to a script's content holds only while nothing else of the run can write ---


async def _grant_always(h: Harness) -> None:
    """The owner presses "Always" for `sh ./task.sh` (the model's first call) while task.sh
    is harmless."""
    from tests.test_telegram_approvals import cards, press

    (h.workspace / "task.sh").write_text("echo harmless\n", encoding="utf-8")
    h.tg.send_private(OWNER, "run the task")
    (card,) = await cards(h)
    await press(h, card, "♾ Always in this session")
    await h.bot_text(OWNER, lambda t: t == "ran it")


async def test_a_granted_script_is_asked_again_while_a_background_worker_of_the_run_could_rewrite_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A worker started with wait=false writes with its own tools while the parent goes on:
    the parent's `sh ./task.sh` could run what the worker writes between the grant's check
    and the shell reading the script, so the grant does not hold; the owner is asked."""
    from tests.test_telegram_approvals import cards, press

    fake_api.script_when(worker_turn("rewrite task.sh", 1), Stall(None))
    fake_api.script(
        reply_tools(ToolUse("exec", {"command": "sh ./task.sh"})),
        reply_text("ran it"),
        reply_tools(spawn("editor", "rewrite task.sh", wait=False)),
        reply_tools(ToolUse("exec", {"command": "sh ./task.sh"})),
        reply_text("ran it again"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        await _grant_always(h)
        tg.send_private(OWNER, "start the editor, then run the task")
        _, card = await cards(h, 2)  # without the rule: no card, the grant ran it unasked
        await press(h, card, "✅ Approve once")
        await h.bot_text(OWNER, lambda t: t == "ran it again")


async def test_a_granted_script_is_asked_for_in_a_worker_while_a_sibling_could_rewrite_it(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """A worker's batch is alone in the worker, not in the run: its parent and siblings
    write at the same time, so a bound grant never holds in a worker."""
    from tests.test_telegram_approvals import cards, press

    fake_api.script_when(worker_turn("run the task", 1), reply_tools(ToolUse("exec", {"command": "sh ./task.sh"})))
    fake_api.script_when(worker_turn("run the task", 2), reply_text("task ran"))
    fake_api.script_when(worker_turn("rewrite task.sh", 1), Stall(None))
    fake_api.script(
        reply_tools(ToolUse("exec", {"command": "sh ./task.sh"})),
        reply_text("ran it"),
        reply_tools(spawn("editor", "rewrite task.sh", wait=False), spawn("runner", "run the task")),
        reply_text("the runner is done"),
    )
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        await _grant_always(h)
        tg.send_private(OWNER, "edit and run at once")
        _, card = await cards(h, 2)  # without the rule: no card, the worker ran it unasked
        assert "Worker “runner”" in (card.text or "")
        await press(h, card, "✅ Approve once")
        await h.bot_text(OWNER, lambda t: t == "the runner is done")
