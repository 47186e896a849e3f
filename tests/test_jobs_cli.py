"""`roost jobs list|cancel` on the machine (subprocesses on the same database)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.storage import Storage
from bot.storage.jobs import NewJob
from tests.test_cli_admin import env_for, roost


async def seed(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    async with await Storage.open(f"sqlite+aiosqlite:///{home / 'roost.db'}") as storage:
        for job_id, name, key in (("aaaa1111", "call Ana", "main"), ("bbbb2222", "standup", "group:telegram:-100777")):
            await storage.create_job(
                NewJob(
                    id=job_id, name=name, prompt=name, session_key=key, platform="telegram",
                    chat_kind="private" if key == "main" else "group", chat_id="1" if key == "main" else "-100777",
                    thread_id=None, creator="telegram:1", kind="interval", spec="3600", timezone="UTC",
                    grace_s=1800, next_run_at=now + timedelta(hours=1), created_at=now,
                )
            )


def test_jobs_list_and_cancel_on_the_machine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    asyncio.run(seed(home))
    env = env_for(home)
    listed = roost("jobs", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "aaaa1111 · “call Ana” · every 1 hour · active" in listed.stdout
    assert "session: group:telegram:-100777" in listed.stdout
    assert "runs once when up to 30 min late" in listed.stdout
    only_main = roost("jobs", "list", "--session", "main", env=env)
    assert "call Ana" in only_main.stdout and "standup" not in only_main.stdout

    cancelled = roost("jobs", "cancel", "bbbb2222", env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == (
        "Cancelled bbbb2222 “standup” (group:telegram:-100777); it will not run again."
    )
    after = roost("jobs", "list", env=env)
    assert "standup" not in after.stdout and "call Ana" in after.stdout
