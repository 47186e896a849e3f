"""The jobs repository on SQLite and PostgreSQL: one due time fires once, whatever repeats it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.scheduling.refs import JobRef, job_ref
from bot.storage import Storage
from bot.storage.inbox import InboxMessage
from bot.storage.jobs import NewJob
from tests.storage_fixtures import clock, db_url, storage  # noqa: F401  (fixtures)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def job(job_id: str = "ab12cd34", kind: str = "interval", spec: str = "3600") -> NewJob:
    return NewJob(
        id=job_id, name="hourly", prompt="check", session_key="main", platform="telegram", chat_kind="private",
        chat_id="1", thread_id=None, creator="telegram:1", kind=kind, spec=spec, timezone="UTC", grace_s=1800,
        next_run_at=NOW + timedelta(hours=1), created_at=NOW,
    )


def message(ref: JobRef) -> InboxMessage:
    return InboxMessage(
        platform="telegram", chat_kind="private", chat_id="1", sender_id="1", sender_name="⏰ hourly",
        text="check", received_at=NOW, update_id=ref.update_id,
    )


async def test_a_due_time_fired_twice_stores_one_run_and_advances_once(storage: Storage) -> None:
    await storage.create_job(job())
    due = NOW + timedelta(hours=1)
    ref = JobRef("ab12cd34", due)
    first = await storage.fire_job(ref.job_id, due, message(ref), "main", advance_to=due + timedelta(hours=1),
                                   advance=True)
    again = await storage.fire_job(ref.job_id, due, message(ref), "main", advance_to=due + timedelta(hours=1),
                                   advance=True)
    assert first is not None and again is None
    (row,) = await storage.inbox_rows(["queued"])
    assert row.session_key == "main" and job_ref(row.message.update_id) == ref
    fired = await storage.get_job("ab12cd34")
    assert fired is not None and fired.next_run_at == due + timedelta(hours=1)
    assert (fired.last_run_at, fired.last_exec, fired.state) == (due, "queued", "active")
    assert await storage.due_jobs(due + timedelta(minutes=30)) == []
    assert await storage.next_due_at() == due + timedelta(hours=1)


async def test_a_missed_one_off_waits_and_run_now_finishes_it(storage: Storage) -> None:
    await storage.create_job(job("0ff0ff00", kind="once", spec=(NOW + timedelta(hours=1)).isoformat()))
    await storage.skip_job("0ff0ff00", NOW + timedelta(hours=1), None)
    missed = await storage.get_job("0ff0ff00")
    assert missed is not None and missed.state == "missed" and missed.last_exec == "missed"
    assert [j.id for j in await storage.list_jobs("main")] == ["0ff0ff00"]  # still listed
    ref = JobRef("0ff0ff00", NOW + timedelta(days=2))
    assert await storage.fire_job(ref.job_id, ref.due, message(ref), "main", advance_to=None, advance=False)
    done = await storage.get_job("0ff0ff00")
    assert done is not None and done.state == "done" and done.missed_at is None


async def test_a_run_left_running_is_interrupted_and_a_retrying_job_without_a_pending_send_failed_at_start(
    storage: Storage,
) -> None:
    await storage.create_job(job())
    await storage.job_started("ab12cd34", "run-1")
    await storage.job_status("ab12cd34", delivery="retrying")
    assert await storage.settle_jobs() == 1
    settled = await storage.get_job("ab12cd34")
    assert settled is not None and (settled.last_exec, settled.last_delivery, settled.last_run_id) == (
        "interrupted", "failed", "run-1"
    )


async def test_a_job_cancelled_or_paused_after_it_was_listed_fires_nothing_and_keeps_its_state(
    storage: Storage,
) -> None:
    """The scheduler lists due jobs, then fires each: whatever committed in between wins."""
    due = NOW + timedelta(hours=1)
    for job_id in ("cafe0001", "cafe0002"):
        await storage.create_job(job(job_id, kind="once", spec=due.isoformat()))
    listed = await storage.due_jobs(due)
    await storage.set_job_state("cafe0001", "cancelled")
    await storage.set_job_state("cafe0002", "paused")
    for row in listed:
        ref = JobRef(row.id, due)
        assert await storage.fire_job(row.id, due, message(ref), "main", advance_to=None, advance=True) is None
        assert await storage.skip_job(row.id, due, None) is False
    ref = JobRef("cafe0001", due)  # Run now never runs a cancelled job either
    assert await storage.fire_job("cafe0001", due, message(ref), "main", advance_to=None, advance=False) is None
    assert await storage.inbox_rows(["queued"]) == []
    assert [(j.id, j.state, j.last_run_at) for j in await storage.list_jobs(include_ended=True)] == [
        ("cafe0001", "cancelled", None), ("cafe0002", "paused", None),
    ]
