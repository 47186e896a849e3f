"""A real `roost run` process exits promptly after SIGTERM: nothing it started (the SDK
import in a worker thread, the hot-reload watcher, the scheduler, database threads, HTTP
pools) may hold the process open once the adapters are closed."""

from __future__ import annotations

import signal
import time

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import reply_text
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, tg  # noqa: F401  (fixture)
from tests.test_shutdown_subprocess import inbox_states, stop
from tests.test_telegram_restart import roost_run

# Measured ~0.5 s once fixed (6–9 s before). The margin is for a loaded 2-core machine; a
# regression (a thread or task that shutdown waits for) costs whole seconds.
EXIT_WITHIN_S = 3.0


async def test_sigterm_exits_promptly(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    fake_api.responder = lambda body: reply_text("pong")
    process = roost_run(tmp_path, tg, fake_api)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
        tg.send_private(OWNER, "ping")
        await tg.await_for(lambda: any(m.text == "pong" for m in tg.bot_messages(OWNER)), timeout=30)
        await inbox_states(tmp_path / "home" / "roost.db", [])  # the run has finished
    except BaseException:
        stop(process, signal.SIGKILL)
        raise
    started = time.monotonic()
    assert stop(process, signal.SIGTERM) == 0
    took = time.monotonic() - started
    assert took < EXIT_WITHIN_S, f"roost run took {took:.2f} s to exit after SIGTERM"


async def test_sigterm_right_after_start_exits_promptly(tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic) -> None:
    """Stopped while the model client may still be loading in its worker thread."""
    process = roost_run(tmp_path, tg, fake_api)
    try:
        await tg.await_for(lambda: tg.is_polling, timeout=30)
    except BaseException:
        stop(process, signal.SIGKILL)
        raise
    started = time.monotonic()
    assert stop(process, signal.SIGTERM) == 0
    took = time.monotonic() - started
    assert took < EXIT_WITHIN_S, f"roost run took {took:.2f} s to exit after SIGTERM"
