"""Pending sends (bot.storage.sends) on SQLite and PostgreSQL: a send recorded twice is
stored once, the owner's report of a send that ended is stored with that end, a job's
re-send survives the start-up settlement, and only ended sends are pruned."""

from __future__ import annotations

from datetime import timedelta

from agent_core.inbound import ReplyTarget
from bot.scheduling.sends import new_send
from bot.storage import Storage
from tests.storage_fixtures import FakeClock, clock, db_url, storage  # noqa: F401  (fixtures)
from tests.test_jobs_storage import job

OWNER = ReplyTarget("telegram", "1")


async def test_a_send_recorded_twice_is_stored_once(storage: Storage, clock: FakeClock) -> None:
    first = new_send("missed:ab12cd34:1767268800", "notice", OWNER, "Missed — run now?", at=clock.now)
    again = new_send("missed:ab12cd34:1767268800", "notice", OWNER, "Missed — run now?", at=clock.now)
    assert await storage.add_send(first) is True
    assert await storage.add_send(again) is False
    (pending,) = await storage.pending_sends()
    assert pending.nonce == first.nonce  # the first one's nonce: every attempt carries it


async def test_an_ended_send_and_its_report_are_stored_together(storage: Storage, clock: FakeClock) -> None:
    answer = new_send("answer:run-1", "answer", ReplyTarget("telegram", "-100", None), "⏰ x\n\nhi", at=clock.now,
                      after_s=10, job_id="ab12cd34")
    await storage.add_send(answer)
    report = new_send("report:answer:run-1", "notice", OWNER, "⚠️ could not deliver", at=clock.now)
    await storage.send_attempted(answer.key, state="failed", attempts=3, uncertain_since=None, next_at=clock.now,
                                 reason="403", follow_up=report)
    ended = await storage.get_send(answer.key)
    assert ended is not None and (ended.state, ended.attempts, ended.reason) == ("failed", 3, "403")
    assert [s.key for s in await storage.pending_sends()] == ["report:answer:run-1"]


async def test_a_job_whose_resend_is_pending_stays_retrying_at_start(storage: Storage, clock: FakeClock) -> None:
    await storage.create_job(job())
    await storage.job_status("ab12cd34", delivery="retrying")
    await storage.add_send(new_send("answer:run-1", "answer", OWNER, "⏰ x", at=clock.now, job_id="ab12cd34"))
    await storage.settle_jobs()
    still = await storage.get_job("ab12cd34")
    assert still is not None and still.last_delivery == "retrying"


async def test_only_sends_that_ended_a_week_ago_are_pruned(storage: Storage, clock: FakeClock) -> None:
    for key in ("old-sent", "old-pending", "new-sent"):
        await storage.add_send(new_send(key, "notice", OWNER, key, at=clock.now))
    await storage.send_attempted("old-sent", state="sent", attempts=0, uncertain_since=None, next_at=clock.now,
                                 reason=None)
    clock.now += timedelta(days=8)
    await storage.send_attempted("new-sent", state="sent", attempts=0, uncertain_since=None, next_at=clock.now,
                                 reason=None)
    assert await storage.prune_sends() == 1
    assert await storage.get_send("old-sent") is None
    assert await storage.get_send("old-pending") is not None and await storage.get_send("new-sent") is not None
