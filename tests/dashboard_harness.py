"""The dashboard served like `roost run` serves it (bot.dashboard.server.start, uvicorn in
the test's loop, a real socket), and a headless Chromium driven by Selenium for the browser
tests (Debian's `chromium` + `chromium-driver`; skipped with the reason where it cannot start)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from bot.dashboard.server import Served, start

SCREENSHOTS = Path(__file__).resolve().parent / "artifacts" / "screenshots"


@dataclass
class Served_:
    served: Served
    link: str

    @property
    def base(self) -> str:
        parts = urlsplit(self.link)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def token(self) -> str:
        return self.link.partition("token=")[2]


@contextlib.asynccontextmanager
async def dashboard(app: Any, adapters: Any = ()) -> AsyncIterator[Served_]:
    """Serve `app`'s dashboard on a free loopback port (settings: dashboard.listen
    127.0.0.1:0)."""
    started = await start(app, list(adapters))
    assert started is not None
    served, link = started
    try:
        yield Served_(served, link)
    finally:
        await served.aclose()


@contextlib.asynccontextmanager
async def logged_in(d: Served_) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=d.base, timeout=10) as client:
        response = await client.get(f"/login?token={d.token}")
        assert response.status_code == 303
        yield client


def csrf_of(html: str) -> str:
    marker = '<meta name="csrf-token" content="'
    return html.split(marker, 1)[1].split('"', 1)[0]


# -- the browser -------------------------------------------------------------------------------

CHROMIUM = os.environ.get("ROOST_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ROOST_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for a test module (starting one takes seconds)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install -e '.[test]')")
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")) or not Path(CHROMEDRIVER).exists():
        pytest.skip(f"no Chromium: {CHROMIUM} and {CHROMEDRIVER} are needed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except Exception as exc:  # noqa: BLE001  (no display, no sandbox, a broken install…)
        pytest.skip(f"headless Chromium could not start: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
