"""The dashboard in a real headless Chromium against the real app: Telegram through
python-telegram-bot and FakeTelegram, the model through the anthropic SDK and FakeAnthropic.

Invariants: whatever untrusted people wrote is shown as text and never runs; the inbox and
the chat cards are one set of approvals (a decision on either side is the only one, and the
other side shows it); the figures are the ones /usage gives. Screenshots of every page go to
tests/artifacts/screenshots/ (CI keeps them)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

By = pytest.importorskip("selenium.webdriver.common.by", reason="selenium is not installed (pip install -e '.[test]')").By

from tests.dashboard_harness import browser, csrf_of, dashboard, logged_in, screenshot  # noqa: F401  (fixture)
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import GROUP, MEMBER, OWNER, TOKEN, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_approvals import buttons, cards, press

ON = {"dashboard": {"listen": "127.0.0.1:0"}}
SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src="x" onerror="window.__pwned = 2">'


async def in_browser(fn: Callable[[], Any]) -> Any:
    """Selenium blocks: it runs in a thread while the loop serves the dashboard."""
    return await asyncio.to_thread(fn)


async def open_page(driver: Any, url: str) -> None:
    await in_browser(lambda: driver.get(url))


async def wait_in_browser(driver: Any, predicate: Callable[[Any], Any], timeout: float = 10.0) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def until() -> Any:  # Selenium's own wait: it polls the page until the predicate holds
        try:
            return WebDriverWait(driver, timeout, poll_frequency=0.02).until(predicate)
        except TimeoutException:
            raise AssertionError("the page never showed it") from None

    return await in_browser(until)


async def login(driver: Any, d: Any) -> None:
    await open_page(driver, d.link)
    assert "Overview" in driver.title


def approvals_shown(driver: Any) -> list[str]:
    # In one script: the live region may be swapped between two WebDriver calls.
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-approval]')).map(e => e.dataset.approval)"
    )


def text_of(driver: Any, selector: str) -> str:
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", selector)


def click(driver: Any, xpath: str) -> None:
    """Click, again if the live region was swapped under the element meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(5):
        try:
            driver.find_element(By.XPATH, xpath).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{xpath} kept changing under the click")


async def test_group_and_web_page_markup_shows_as_text_and_never_runs(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, browser: Any
) -> None:
    page_text = f"Breaking news {SCRIPT} and {IMG} end."
    fake_api.script(
        reply_text("Noted."),  # the group member's run
        reply_tools(ToolUse("read_file", {"path": "page.html"})),  # the owner's: a fetched page
        reply_text("The page says hello."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, **ON) as h, dashboard(h.app, [h.adapter]) as d:
        (h.workspace / "page.html").write_text(page_text)
        tg.send_group(GROUP, MEMBER, f"hi {SCRIPT} {IMG}", mention=True, first_name="Bob")
        await h.bot_text(GROUP, lambda t: t == "Noted.")
        tg.send_private(OWNER, "read page.html")
        await h.says(OWNER, "The page says hello.")
        await login(browser, d)
        runs = await h.app.storage.runs_page()
        assert len(runs) == 2
        for run in runs:
            await open_page(browser, f"{d.base}/runs/{run.id}")
            timeline = browser.find_element(By.CSS_SELECTOR, ".timeline").text
            assert SCRIPT in timeline and IMG in timeline, run.session_key  # shown, as text
            assert browser.execute_script("return window.__pwned === undefined") is True
            assert browser.find_elements(By.CSS_SELECTOR, ".timeline script, .timeline img") == []
            screenshot(browser, f"run-{run.session_key.replace(':', '_')}")


async def test_an_exec_approval_is_decided_on_the_page_and_the_chat_card_says_so(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, browser: Any
) -> None:
    first, second = "echo dashboard >> marker.txt", "echo chat >> marker.txt"
    fake_api.script(
        reply_tools(ToolUse("exec", {"command": first})),
        reply_text("First done."),
        reply_tools(ToolUse("exec", {"command": second})),
        reply_text("Second answered."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, **ON) as h, dashboard(h.app, [h.adapter]) as d:
        created: list[float] = []
        h.app.gate.listeners.append(lambda: created.append(time.monotonic()))
        await login(browser, d)
        await open_page(browser, f"{d.base}/approvals")
        await wait_in_browser(browser, lambda b: "No approval is waiting" in b.page_source)
        screenshot(browser, "approvals-empty")

        tg.send_private(OWNER, "write the marker")
        shown = await wait_in_browser(browser, approvals_shown)
        seen_at = time.monotonic()
        assert seen_at - created[0] < 1.0  # pushed by the server, not found by polling
        (card,) = await cards(h)
        assert shown == [(await h.app.storage.pending_approvals())[0].id]
        assert first in text_of(browser, ".approval pre")
        screenshot(browser, "approvals")

        await in_browser(lambda: click(browser, "//button[text()='Approve once']"))
        await h.says(OWNER, "First done.")
        assert (h.workspace / "marker.txt").read_text() == "dashboard\n"
        edited = await h.bot_text(OWNER, lambda t: t.endswith("✅ Approved once by telegram:1 from the dashboard."))
        assert edited.message_id == card.message_id and edited.reply_markup is None
        await wait_in_browser(browser, lambda b: not approvals_shown(b))

        # A press in the chat first: the page drops it at once; the page's late answer changes nothing.
        tg.send_private(OWNER, "and another")
        (pending,) = await wait_in_browser(browser, approvals_shown)
        _, card2 = await cards(h, 2)
        await press(h, card2, "❌ Deny")
        await wait_in_browser(browser, lambda b: not approvals_shown(b))
        async with logged_in(d) as client:
            page = await client.get("/approvals")
            late = await client.post(f"/approvals/{pending}", data={"csrf": csrf_of(page.text), "decision": "once"},
                                     headers={"x-requested-with": "fetch"})  # fmt: skip
        assert late.status_code == 409 and "nothing changed" in late.text
        assert (await h.app.storage.get_approval(pending)).state == "deny"
        await h.says(OWNER, "Second answered.")
        assert (h.workspace / "marker.txt").read_text() == "dashboard\n"  # the denied command never ran


async def test_a_run_with_two_tool_calls_shows_both_with_secrets_redacted(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, browser: Any
) -> None:
    shape = "sk-ant-api03-" + "x" * 24
    fake_api.script(
        reply_tools(ToolUse("read_file", {"path": "a.txt"}), ToolUse("list_dir", {"path": "."})),
        reply_text("Both read."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, **ON) as h, dashboard(h.app, [h.adapter]) as d:
        (h.workspace / "a.txt").write_text(f"bot token {TOKEN} and key {shape}\n")
        tg.send_private(OWNER, f"read a.txt, my token is {TOKEN}")
        await h.says(OWNER, "Both read.")
        (run,) = await h.app.storage.runs_page()
        await login(browser, d)
        await open_page(browser, f"{d.base}/runs/{run.id}")
        tools = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".item-tool h2")]
        assert [t.split()[0] for t in tools] == ["read_file", "list_dir"]
        source = browser.page_source
        assert TOKEN not in source and shape not in source
        assert "[REDACTED]" in browser.find_element(By.CSS_SELECTOR, ".item-tool .output").text
        screenshot(browser, "run")
        # Text search finds the run by what it said.
        await open_page(browser, f"{d.base}/runs?q=both+read")
        assert len(browser.find_elements(By.CSS_SELECTOR, "tbody tr a")) == 1


async def _metrics_written(h: Any, runs: int) -> None:
    """A run's metrics are written just after its reply: wait for the runs, then for their
    metrics' writes (`Metrics.settle`), and check they are stored."""
    from datetime import UTC, datetime, timedelta

    async with asyncio.timeout(10):
        await h.app.conversations.lanes.drain()
        await h.app.conversations.metrics.settle()
    assert (await h.app.storage.metrics_totals(datetime.now(UTC) - timedelta(days=1))).runs >= runs


def _usage_numbers(text: str) -> dict[str, int]:
    """Runs and tokens of the "Today, total:" line of /usage."""
    line = next(x for x in text.splitlines() if x.startswith("Today, total:"))
    m = re.search(r"(\d+) runs .*tokens ([\d,]+) in, ([\d,]+) out", line)
    assert m is not None, line
    return {"runs": int(m[1]), "in": int(m[2].replace(",", "")), "out": int(m[3].replace(",", ""))}


async def test_usage_page_totals_equal_the_usage_command_and_run_now_runs_a_job_once(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, browser: Any
) -> None:
    fake_api.script(reply_text("One."), reply_text("Two."), reply_text("Stretch now!"))
    async with running(tmp_path, tg, fake_api, paced=False, **ON) as h, dashboard(h.app, [h.adapter]) as d:
        tg.send_private(OWNER, "one")
        await h.says(OWNER, "One.")
        tg.send_private(OWNER, "two")
        await h.says(OWNER, "Two.")
        await _metrics_written(h, 2)
        tg.send_private(OWNER, "/usage")
        usage = await h.bot_text(OWNER, lambda t: t.startswith("Today, total:"))
        expected = _usage_numbers(usage.text or "")
        assert expected["runs"] == 2 and expected["in"] > 0

        await login(browser, d)
        await open_page(browser, f"{d.base}/usage")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-window="Today"]')
        shown = {
            "runs": int(row.find_element(By.CSS_SELECTOR, ".runs").text),
            "in": int(row.find_element(By.CSS_SELECTOR, ".tok-in").text.replace(",", "")),
            "out": int(row.find_element(By.CSS_SELECTOR, ".tok-out").text.replace(",", "")),
        }
        assert shown == expected
        screenshot(browser, "usage")

        from tests.test_dashboard import _job

        job = await _job(h.app)
        before = len(fake_api.requests)
        await open_page(browser, f"{d.base}/jobs")
        screenshot(browser, "jobs")
        await in_browser(lambda: browser.find_element(
            By.CSS_SELECTOR, f'tr[data-job="{job}"] form[action$="/run"] button').click())
        await h.bot_text(OWNER, lambda t: "Stretch now!" in t)
        notice = await wait_in_browser(browser, lambda b: text_of(b, ".notice"))
        assert "Running “stretch” now" in notice
        await h.app.conversations.lanes.drain()
        assert len(fake_api.requests) == before + 1  # once
        assert (await h.app.storage.get_job(job)).last_run_id is not None

        for name, path in (("overview", "/"), ("sessions", "/sessions"), ("runs", "/runs"), ("audit", "/audit"),
                           ("memory", "/memory"), ("policy", "/policy")):  # fmt: skip
            await open_page(browser, d.base + path)
            assert browser.find_elements(By.CSS_SELECTOR, "main h1"), path
            screenshot(browser, name)
        # On a phone: nothing wider than the screen (tables scroll inside themselves).
        await in_browser(lambda: browser.set_window_size(390, 844))
        try:
            for name, path in (("phone-overview", "/"), ("phone-jobs", "/jobs"), ("phone-usage", "/usage")):
                await open_page(browser, d.base + path)
                assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
                screenshot(browser, name)
        finally:
            await in_browser(lambda: browser.set_window_size(1200, 900))
        logs = await in_browser(lambda: browser.get_log("browser"))
        assert not [e for e in logs if "Content Security Policy" in e.get("message", "")]  # nothing inline blocked
