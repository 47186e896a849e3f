"""SQLite serves one `roost run`: a second process on the same file exits with one line
saying why and how to scale out, instead of answering every update a second time; and a
first process killed with -9 never leaves the database locked for the next start."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import httpx

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.roost_process import start_roost_run
from tests.telegram_harness import OWNER, TOKEN, free_port, tg  # noqa: F401  (fixture)



def start(
    tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, name: str, **extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / f"{name}.log"
    process = start_roost_run(
        log,
        ROOST_HOME=str(tmp_path / "home"),
        ROOST_OWNERS=f'["telegram:{OWNER}"]',
        ROOST_AGENT__MODEL="claude-test",
        ROOST_TELEGRAM__BASE_URL=tg.base_url,
        TELEGRAM_BOT_TOKEN=TOKEN,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=llm.base_url,
        **extra,
    )
    return process, log


def ended(process: subprocess.Popen[bytes], sig: signal.Signals | None = None, timeout: float = 60) -> int:
    try:
        if sig is not None:
            process.send_signal(sig)
        return process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def logged(log: Path, text: str, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while text not in log.read_text():
        assert asyncio.get_running_loop().time() < deadline, log.read_text()
        await asyncio.sleep(0.05)  # timing-ok: re-check another process's log


async def test_second_roost_run_on_one_sqlite_file_exits_with_the_reason_and_answers_nothing(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = lambda body: reply_text("one answer")
    first, _ = start(tmp_path, tg, fake_api, "first")
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=60)
        second, second_log = start(tmp_path, tg, fake_api, "second")
        assert ended(second) == 3
        lines = [line for line in second_log.read_text().splitlines() if line.startswith("roost:")]
        assert len(lines) == 1, second_log.read_text()
        assert "already serves the SQLite database" in lines[0] and "PostgreSQL" in lines[0]
        assert str(tmp_path / "home" / "roost.db") in lines[0]

        tg.send_private(OWNER, "hello")  # answered once: only the first process serves
        await tg.await_for(lambda: any(m.text == "one answer" for m in tg.bot_messages(OWNER)), timeout=30)
        assert len(fake_api.requests) == 1
    finally:
        # kill -9: the kernel releases the lock with the process; nothing is left stuck.
        ended(first, signal.SIGKILL)

    port = free_port()
    third, third_log = start(tmp_path, tg, fake_api, "third", ROOST_HEALTH_LISTEN=f"127.0.0.1:{port}")
    try:
        await logged(third_log, "Roost is running")
        async with httpx.AsyncClient() as client:  # and a load balancer sees it healthy
            health = await client.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        assert (health.status_code, health.text) == (200, "ok\n")
    finally:
        assert ended(third, signal.SIGTERM) == 0
