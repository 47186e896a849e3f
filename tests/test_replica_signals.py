"""Buttons and answers anywhere: with two replicas on one PostgreSQL behind a load balancer
(Telegram webhook mode), a press, an answer or a /stop that reaches replica B acts on the
run waiting on replica A — at once, once, and only by whoever may.

The replicas are two full apps in this test process (each its own engine, connections,
webhook server, lanes and signal connection; they share only the database and the
workspace); the fake Bot API routes each update to the replica the test names, as a load
balancer would.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_state import StoredMessage
from tests.storage_fixtures import fresh_postgres_database
from tests.replica_support import until, webhook_replicas
from tests.telegram_harness import OWNER, STRANGER, Harness, tg  # noqa: F401  (fixture)

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

QUESTION = "Which server should I restart?"
WITHIN_S = 1.0
"""The issue's bound for a cross-replica press; a signal takes milliseconds, the safety-net
re-read 10 s, so this tells them apart with a wide margin on a loaded machine."""


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, **overrides: Any) -> Any:
    async with fresh_postgres_database() as url:
        async with webhook_replicas(tmp_path, tg, llm, url, 2, **overrides) as started:
            for h, _ in started:  # a start-up sweep could otherwise take the test's first session
                replicas = h.app.conversations.replicas
                assert replicas is not None
                await until(lambda: replicas.sweeps >= 1)
            yield started


def buttons(message: StoredMessage) -> dict[str, str]:
    rows = (message.reply_markup or {}).get("inline_keyboard", [])
    return {b["text"]: b["callback_data"] for row in rows for b in row}


async def first(h: Harness, part: str) -> StoredMessage:
    """The first bot message in the owner's chat showing `part` (a reply may open with a
    tool's status line)."""
    return await h.bot_text(OWNER, lambda t: part in t)


async def answered(tg: FakeTelegram, query: str) -> tuple[dict[str, Any], float]:
    """The callback answer and when it was given (monotonic)."""
    state = await tg.await_for(lambda: tg.callback_query(query).answered and tg.callback_query(query))
    at = next(c.finished_at for c in tg.calls if c.method == "answerCallbackQuery" and c.params.get("callback_query_id") == query)
    return state.answer or {}, at


def tool_results(fake_api: FakeAnthropic, request: int) -> list[dict[str, Any]]:
    return [b for b in user_blocks(fake_api.requests[request].json) if b.get("type") == "tool_result"]


async def runs_of(h: Harness) -> int:
    from sqlalchemy import text

    async with h.app.storage.engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM runs WHERE session_key = 'main'"))).scalar_one())


async def exec_waits_on_a(tg: FakeTelegram, fake_api: FakeAnthropic, a: Harness, hook_a: str) -> StoredMessage:
    """The owner's message reaches replica A; its run waits on an approval card."""
    fake_api.script(reply_tools(ToolUse("exec", {"command": "echo ran >> marker.txt"})), reply_text("ok, done"))
    tg.route_webhook(hook_a)
    tg.send_private(OWNER, "write the marker")
    card = await first(a, "🔐")
    assert a.app.conversations.lanes.is_busy("main")  # the run is A's
    return card


async def test_an_approval_pressed_through_replica_b_resolves_the_run_on_replica_a_within_1_s(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        pressed = time.monotonic()
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["✅ Approve once"], first_name="Olivia")
        answer, at = await answered(tg, query)
        assert answer.get("text") == "✅ Approved once."
        await first(a, "ok, done")
        # The run's next model call (with the tool's result): the first request after the press.
        went_on = min(r.received_at for r in fake_api.requests if r.received_at >= pressed)
        assert went_on - at < WITHIN_S, f"the run went on {went_on - at:.3f} s after the press was answered"
        (result,) = tool_results(fake_api, 1)
        assert not result.get("is_error")
        assert (a.workspace / "marker.txt").read_text() == "ran\n"
        # The card in the chat says who decided (by name), edited by the replica whose run it is.
        await a.app.conversations.lanes.drain()
        await a.bot_text(OWNER, lambda t: t.endswith("✅ Approved once by Olivia."))
        decided = tg.message(OWNER, card.message_id)
        assert (decided.text or "").endswith("✅ Approved once by Olivia.") and decided.reply_markup is None


async def test_always_pressed_through_replica_b_stores_the_grant_of_the_run_on_replica_a(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["♾ Always in this session"], first_name="Olivia")
        answer, _ = await answered(tg, query)
        assert "Always" in answer.get("text", ""), answer
        await first(a, "ok, done")
        grants = await b.app.storage.grants("main")
        assert [g.rule.input for g in grants] == ["echo ran >> marker.txt"]


async def test_a_press_by_the_wrong_person_on_replica_b_is_refused_and_the_run_keeps_waiting(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        query = tg.press_button(OWNER, card.message_id, STRANGER, buttons(card)["✅ Approve once"], first_name="Mallory")
        answer, _ = await answered(tg, query)
        assert answer == {"text": "This approval isn't yours.", "show_alert": True}
        (pending,) = await a.app.storage.pending_approvals()
        assert pending.state == "pending" and tg.message(OWNER, card.message_id).edits == []
        assert not (a.workspace / "marker.txt").exists() and len(fake_api.requests) == 1
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["❌ Deny"], first_name="Olivia")
        answer, _ = await answered(tg, query)
        await first(a, "ok, done")
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and not (a.workspace / "marker.txt").exists()


async def test_a_double_press_on_replicas_a_and_b_is_decided_once(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        data = buttons(card)
        tg.route_webhook(hook_b)
        on_b = tg.press_button(OWNER, card.message_id, OWNER, data["❌ Deny"], first_name="Olivia")
        tg.route_webhook(hook_a)
        on_a = tg.press_button(OWNER, card.message_id, OWNER, data["✅ Approve once"], first_name="Olivia")
        answers = [(await answered(tg, q))[0].get("text", "") for q in (on_b, on_a)]
        won = [t for t in answers if not t.startswith("Already decided")]
        assert len(won) == 1, answers
        await first(a, "ok, done")
        (result,) = tool_results(fake_api, 1)
        ran = (a.workspace / "marker.txt").read_text() if (a.workspace / "marker.txt").exists() else ""
        assert ran in ("", "ran\n")
        assert (won[0] == "✅ Approved once.") == (ran == "ran\n") == (not result.get("is_error"))
        shown = "✅ Approved once by Olivia." if ran else "❌ Denied by Olivia."
        await a.bot_text(OWNER, lambda t: t.endswith(shown))  # the card shows the one decision
        assert sum(shown in (e.text or "") for e in tg.message(OWNER, card.message_id).edits) == 0


async def test_an_ask_user_answer_through_replica_b_continues_the_run_on_replica_a_not_a_resume(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})), reply_text("Restarting web-2 now."))
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        tg.route_webhook(hook_a)
        tg.send_private(OWNER, "restart the server that is down")
        await a.says(OWNER, f"❓ {QUESTION}")
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "web-2")
        await first(a, "Restarting web-2 now.")
        await a.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2
        assert any("answered: web-2" in str(r.get("content")) for r in tool_results(fake_api, 1))
        assert await runs_of(a) == 1, "the answer started a new run instead of going on"
        assert not any("Roost restarted" in (m.text or "") for m in tg.bot_messages(OWNER))


async def test_an_ask_button_pressed_through_replica_b_continues_the_run_on_replica_a(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(
        reply_tools(ToolUse("ask_user", {"question": QUESTION, "options": ["web-1", "web-2"]})),
        reply_text("Restarting web-1 now."),
    )
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        tg.route_webhook(hook_a)
        tg.send_private(OWNER, "restart the server that is down")
        card = await a.says(OWNER, f"❓ {QUESTION}")
        tg.route_webhook(hook_b)
        refused = tg.press_button(OWNER, card.message_id, STRANGER, buttons(card)["web-2"], first_name="Mallory")
        assert (await answered(tg, refused))[0] == {"text": "This question isn't for you.", "show_alert": True}
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["web-1"], first_name="Olivia")
        assert (await answered(tg, query))[0].get("text") == "✓ web-1"
        await first(a, "Restarting web-1 now.")
        await a.app.conversations.lanes.drain()
        assert any("answered: web-1" in str(r.get("content")) for r in tool_results(fake_api, 1))
        assert await runs_of(a) == 1


async def test_stop_through_replica_b_stops_the_run_on_replica_a(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "/new")  # B knows the session is busy on A
        await b.says(OWNER, "I'm in the middle of an answer; /stop it first, then /new.")
        tg.send_private(OWNER, "/stop")
        await b.says(OWNER, "Stopped.")
        await a.app.conversations.lanes.drain()
        assert not a.app.conversations.lanes.is_busy("main")
        closed = tg.message(OWNER, card.message_id)
        assert closed.reply_markup is None  # the card lost its buttons: nothing can approve it now
        assert not (a.workspace / "marker.txt").exists() and len(fake_api.requests) == 1
        tg.send_private(OWNER, "/stop")
        await tg.await_for(lambda: [m for m in tg.bot_messages(OWNER) if m.text == "Nothing is running."])


async def test_interrupt_mode_message_through_replica_b_stops_the_run_on_replica_a(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    async with two_replicas(tmp_path, tg, fake_api, agent={"queue_mode": "interrupt"}) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "never mind, say hello")
        await first(a, "ok, done")  # the next run, on A, with the new message
        assert tg.message(OWNER, card.message_id).reply_markup is None  # the stopped run's card
        assert any("never mind" in str(b) for b in user_blocks(fake_api.requests[-1].json))
        assert not (a.workspace / "marker.txt").exists()


async def test_a_press_whose_signal_is_lost_still_lets_the_run_on_replica_a_go_on_after_its_reconnect(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    import asyncpg

    from tests.storage_fixtures import _asyncpg_dsn

    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        signals = a.app.conversations.elsewhere.signals  # type: ignore[union-attr]
        pid = signals._conn.get_server_pid()
        admin = await asyncpg.connect(_asyncpg_dsn(a.app.storage.engine.url))
        try:  # A's listening connection dies: the press's NOTIFY never reaches A
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        tg.route_webhook(hook_b)
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["✅ Approve once"], first_name="Olivia")
        answer, _ = await answered(tg, query)
        assert answer.get("text") == "✅ Approved once."  # nobody claimed it in time: decided on B
        # A reconnects and re-reads the rows its runs wait on: the run goes on, once.
        await a.bot_text(OWNER, lambda t: "ok, done" in t, timeout=30)
        assert (a.workspace / "marker.txt").read_text() == "ran\n"
        # The card says who decided (its replica never heard the presser's name: the identity).
        await a.bot_text(OWNER, lambda t: "✅ Approved once by" in t and t.startswith("🔐"))
        assert tg.message(OWNER, card.message_id).reply_markup is None
        assert signals._conn is not None and signals._conn.get_server_pid() != pid


async def test_an_answer_to_a_question_whose_replica_is_gone_resumes_the_task_on_replica_b(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.script(reply_tools(ToolUse("ask_user", {"question": QUESTION})), reply_text("Restarting web-2 now."))
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        tg.route_webhook(hook_a)
        tg.send_private(OWNER, "restart the server that is down")
        await a.says(OWNER, f"❓ {QUESTION}")
        await a.app.conversations.aclose()  # A stops: its run is cut off, the question kept
        async with a.app.storage.engine.begin() as conn:  # as kill -9 leaves it: still "running"
            from sqlalchemy import text

            await conn.execute(text("UPDATE runs SET status = 'running', finished_at = NULL"))
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "web-2")
        answer = await b.bot_text(OWNER, lambda t: "Restarting web-2 now." in t, timeout=20)
        # Its run was cut off with A (the stop wrote its tool result): the answer continues the
        # task as the next run's words, on B, as after a restart of one process.
        assert "web-2" in str(user_blocks(fake_api.requests[-1].json))
        # A's cut-off run was settled first, as a restart settles it: marked, offered once.
        offer = await b.bot_text(OWNER, lambda t: t.startswith("I was restarted while working on: restart the"))
        assert offer.message_id < answer.message_id  # settled before the task went on
        runs = {r.status for r in await b.app.storage.interrupted_runs(datetime.now(UTC) - timedelta(hours=1))}
        assert runs == {"interrupted"}


async def test_in_a_group_who_asked_may_stop_the_answer_on_replica_a_through_replica_b_and_nobody_else(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from tests.fakes.anthropic_script import Reply, Stall, Text
    from tests.telegram_harness import BOT_USERNAME, GROUP, MEMBER

    other, key = 78, f"group:telegram:{GROUP}"
    fake_api.script(Reply(Text("Thinking about your question"), Stall(30)))
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        tg.route_webhook(hook_a)
        tg.send_group(GROUP, MEMBER, "a long question", mention=True, first_name="Bob")
        await a.bot_text(GROUP, lambda t: t.startswith("Thinking about your question"))
        tg.route_webhook(hook_b)
        tg.send_group(GROUP, other, f"/stop@{BOT_USERNAME}", first_name="Mallory")
        await b.says(GROUP, "Only the person who asked, my owner or this group's admins can stop this answer.")
        assert a.app.conversations.lanes.is_busy(key)
        tg.send_group(GROUP, MEMBER, f"/stop@{BOT_USERNAME}", first_name="Bob")
        await b.says(GROUP, "Stopped.")
        await a.app.conversations.lanes.drain()
        assert not a.app.conversations.lanes.is_busy(key)


async def test_an_approval_decided_on_replica_bs_dashboard_resolves_the_run_on_replica_a(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    from agent_core.approvals import Decision, ResolveOutcome
    from bot.operations import Actor
    from bot.roles import Role

    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        (pending,) = await b.app.storage.pending_approvals()
        dashboard = Actor(f"telegram:{OWNER}", Role.OWNER, "dashboard")  # as bot/dashboard/server.py acts
        result = await b.app.conversations.operations.decide(dashboard, pending.id, Decision.DENY)
        assert result.outcome is ResolveOutcome.RESOLVED and result.elsewhere
        await first(a, "ok, done")
        (tool,) = tool_results(fake_api, 1)
        assert tool.get("is_error") and not (a.workspace / "marker.txt").exists()
        await a.bot_text(OWNER, lambda t: t.startswith("🔐") and t.endswith("from the dashboard."))
        again = await b.app.conversations.operations.decide(dashboard, pending.id, Decision.ONCE)
        assert again.outcome is ResolveOutcome.ALREADY_DECIDED
        assert tg.message(OWNER, card.message_id).reply_markup is None


async def test_a_replica_stopping_gracefully_tells_the_others_who_answer_its_queue_without_waiting_for_a_sweep(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Rolling restart: the stopping replica lets its sessions go and says so; the message
    waiting for it is answered by the other at once, not at its next sweep (here a minute)."""
    async with two_replicas(tmp_path, tg, fake_api) as [(a, hook_a), (b, hook_b)]:
        await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "and then the milk")
        replicas = b.app.conversations.replicas
        assert replicas is not None
        await until(lambda: replicas.sweeps >= 1)
        replicas.sweep_s = 60.0  # from the next wait on: only a wake sweeps within the test
        swept = replicas.sweeps
        await until(lambda: replicas.sweeps > swept, timeout=10)
        await a.app.conversations.aclose()  # SIGTERM's path: runs stopped, sessions let go
        stopped = time.monotonic()
        await first(b, "ok, done")
        assert time.monotonic() - stopped < 15
        assert any("and then the milk" in str(blk) for blk in user_blocks(fake_api.requests[-1].json))


async def test_steer_mode_a_steering_run_on_replica_a_takes_what_reached_replica_b_first_in_order(
    dialect: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    """Steer mode with replicas: the run takes, at its next step, the messages written while
    it worked — also those another replica took in — in the order they were written."""
    async with two_replicas(tmp_path, tg, fake_api, agent={"queue_mode": "steer"}) as [(a, hook_a), (b, hook_b)]:
        card = await exec_waits_on_a(tg, fake_api, a, hook_a)
        tg.route_webhook(hook_b)
        tg.send_private(OWNER, "older: use the blue folder")
        await tg.await_for(lambda: any("into the answer" in (m.text or "") for m in tg.bot_messages(OWNER)))
        tg.route_webhook(hook_a)
        tg.send_private(OWNER, "newer: and name it today")
        await tg.await_for(lambda: len([m for m in tg.bot_messages(OWNER) if "into the answer" in (m.text or "")]) >= 2)
        query = tg.press_button(OWNER, card.message_id, OWNER, buttons(card)["✅ Approve once"], first_name="Olivia")
        await answered(tg, query)
        await first(a, "ok, done")
        steered = str(user_blocks(fake_api.requests[1].json))  # the call after the tool ran
        assert "older: use the blue folder" in steered and "newer: and name it today" in steered, steered
        assert steered.index("older: use the blue folder") < steered.index("newer: and name it today")
        await a.app.conversations.lanes.drain()
        assert len(fake_api.requests) == 2  # both in that answer, nothing answered again
