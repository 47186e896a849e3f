"""The dashboard over HTTP: who gets in (token link, signed cookie, rotation), CSRF on every
state-changing request, the security headers, and `roost run`'s refusal of a remote bind.
The browser-level tests are in test_dashboard_browser.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot.dashboard import login
from tests.app_harness import OWNER_ID, running_app
from tests.dashboard_harness import csrf_of, dashboard, logged_in
from tests.fakes.anthropic_api import FakeAnthropic

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_ANY_PORT = {"listen": "127.0.0.1:0"}
PAGES = ("/", "/approvals", "/sessions", "/runs", "/jobs", "/usage", "/audit", "/memory", "/policy")


async def test_no_token_a_wrong_token_or_a_forged_cookie_get_the_401_page(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        async with httpx.AsyncClient(base_url=d.base) as client:
            for path in PAGES:
                response = await client.get(path)
                assert response.status_code == 401 and "Not logged in" in response.text, path
            assert (await client.get("/login?token=wrong")).status_code == 401
            assert (await client.get("/login")).status_code == 401
            client.cookies.set(login.COOKIE, "eyJjIjoieCJ9.forged.signature")
            assert (await client.get("/")).status_code == 401
            # Signed with another key (another install's token): refused too.
            other = login.Keys(tmp_path / "elsewhere")
            client.cookies.set(login.COOKIE, other.new_cookie()[0])
            assert (await client.get("/approvals")).status_code == 401


async def test_the_token_link_logs_in_with_a_strict_httponly_cookie_and_every_page_has_the_headers(
    tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        async with httpx.AsyncClient(base_url=d.base) as client:
            response = await client.get(f"/login?token={d.token}")
            assert response.status_code == 303 and response.headers["location"] == "/"
            cookie = response.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie
            for path in PAGES:
                page = await client.get(path)
                assert page.status_code == 200, path
                csp = page.headers["content-security-policy"]
                assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
                assert page.headers["x-frame-options"] == "DENY"
                assert page.headers["referrer-policy"] == "no-referrer"
                assert "<script>" not in page.text  # no inline script anywhere
            static = await client.get("/static/dashboard.js")
            assert static.status_code == 200 and static.headers["x-content-type-options"] == "nosniff"


async def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        job = await _job(app)
        async with logged_in(d) as client:
            for data in ({}, {"csrf": "guess"}):
                refused = await client.post(f"/jobs/{job}/pause", data=data)
                assert refused.status_code == 403
            assert (await app.storage.get_job(job)).state == "active"
            page = await client.get("/jobs")
            cross = await client.post(f"/jobs/{job}/pause", data={"csrf": csrf_of(page.text)},
                                      headers={"origin": "http://evil.example"})  # fmt: skip
            assert cross.status_code == 403
            assert (await app.storage.get_job(job)).state == "active"
            done = await client.post(f"/jobs/{job}/pause", data={"csrf": csrf_of(page.text)})
            assert done.status_code == 303
            assert (await app.storage.get_job(job)).state == "paused"


async def test_rotating_the_token_ends_the_old_link_and_every_session(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        async with logged_in(d) as client:
            assert (await client.get("/")).status_code == 200
            new = login.rotate(app.settings.home_dir)  # what `roost dashboard rotate` does
            assert (await client.get("/")).status_code == 401
            assert (await client.get(f"/login?token={d.token}")).status_code == 401
            assert (await client.get(f"/login?token={new}")).status_code == 303


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))}
    env.update(ROOST_HOME=str(home), ROOST_OWNERS='["telegram:1"]', TELEGRAM_BOT_TOKEN="123456:TEST-token_for-roost",
               ROOST_TELEGRAM__BASE_URL="http://127.0.0.1:9/")  # never reached, unless replaced
    env.update(extra)
    return env


@pytest.mark.parametrize("listen", ["0.0.0.0:8765", "192.168.1.20:8765", "example.com:80"])
def test_a_non_loopback_bind_without_the_opt_in_stops_roost_run_in_one_line(tmp_path: Path, listen: str) -> None:
    result = subprocess.run([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, capture_output=True, text=True,
                            env=_env(tmp_path / "home", ROOST_DASHBOARD__LISTEN=listen), timeout=60)  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("roost: the dashboard would listen on ") and "ROOST_DASHBOARD__ALLOW_REMOTE" in lines[0]
    assert not (tmp_path / "home" / "roost.db").exists()  # refused before anything started


def test_roost_dashboard_url_prints_the_link_and_rotate_replaces_it(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bot.cli", "dashboard", *args], cwd=ROOT, capture_output=True,
                              text=True, env=_env(tmp_path / "home"), timeout=60)  # fmt: skip

    first = cli("url").stdout.strip()
    assert first.startswith("http://127.0.0.1:8765/login?token=") and len(first) > 60
    assert cli("url").stdout.strip() == first
    rotated = cli("rotate").stdout.strip().splitlines()[-1]
    assert rotated != first and rotated.startswith("http://127.0.0.1:8765/login?token=")
    assert oct((tmp_path / "home" / login.FILE_NAME).stat().st_mode & 0o777) == "0o600"


def test_with_the_dashboard_off_serving_imports_none_of_its_modules() -> None:
    # What `roost run` imports before it knows whether to serve the dashboard.
    code = (
        "import json, sys\n"
        "import bot.cli, bot.app, bot.platforms, adapters.telegram\n"
        "print(json.dumps([m for m in ('starlette', 'uvicorn', 'jinja2', 'itsdangerous', 'bot.dashboard') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


async def _job(app) -> str:  # noqa: ANN001
    from datetime import UTC, datetime, timedelta

    from bot.storage.jobs import NewJob

    now = datetime.now(UTC)
    job = await app.storage.create_job(NewJob(
        id="j1", name="stretch", prompt="remind me to stretch", session_key="main", platform="telegram",
        chat_kind="private", chat_id="1", thread_id=None, creator="telegram:1", kind="interval", spec="3600",
        timezone="UTC", grace_s=60, next_run_at=now + timedelta(hours=1), created_at=now,
    ))  # fmt: skip
    return job.id


async def test_roost_run_serves_the_dashboard_prints_its_link_and_stops_cleanly(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    # The real wiring: `roost run` (a process) against the fake Bot API, the dashboard on a
    # free loopback port; the printed link logs in; SIGTERM still exits 0.
    import asyncio
    import signal

    from tests.fakes.telegram_api import FakeTelegram
    from tests.telegram_harness import TOKEN, free_port

    port = free_port()
    with FakeTelegram(token=TOKEN) as tg:
        env = _env(tmp_path / "home", ROOST_TELEGRAM__BASE_URL=tg.base_url, ANTHROPIC_API_KEY="test-key",
                   ANTHROPIC_BASE_URL=fake_api.base_url, ROOST_DASHBOARD__LISTEN=f"127.0.0.1:{port}")  # fmt: skip
        log_path = tmp_path / "run.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env, stdout=log, stderr=log)
            try:
                await tg.await_for(lambda: tg.is_polling, timeout=60)

                async def link() -> str:
                    async with asyncio.timeout(30):
                        while "Dashboard: " not in log_path.read_text():
                            await asyncio.sleep(0.05)
                    return log_path.read_text().split("Dashboard: ", 1)[1].split()[0]

                url = await link()
                assert url.startswith(f"http://127.0.0.1:{port}/login?token=")
                async with httpx.AsyncClient(timeout=None) as client:
                    assert (await client.get(url)).status_code == 303
                    assert (await client.get(f"http://127.0.0.1:{port}/approvals")).status_code == 200
                    # A page left open on the event stream does not hold the shutdown up.
                    async with client.stream("GET", f"http://127.0.0.1:{port}/events") as events:
                        assert events.status_code == 200
                        await anext(events.aiter_lines())
                        stopped_at = asyncio.get_running_loop().time()
                        process.send_signal(signal.SIGTERM)
                        assert await asyncio.to_thread(process.wait, 60) == 0
                        # ~0.3 s measured; a generous bound only tells "not held up" from "held up".
                        assert asyncio.get_running_loop().time() - stopped_at < 15
            finally:
                if process.poll() is None:
                    process.kill()


async def test_the_memory_page_shows_mains_files_and_logs_never_a_groups(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        root = app.settings.workspace_dir
        (root / "MEMORY.md").write_text("owner likes <b>tea</b>\n")
        (root / "memory" / "2026-11-20.md").write_text("main log: dentist at 9\n")
        group_dir = root / "memory" / "groups" / "telegram_-100"
        group_dir.mkdir(parents=True)
        (group_dir / "2026-11-20.md").write_text("GROUP-CANARY said hello\n")
        async with logged_in(d) as client:
            page = (await client.get("/memory")).text
            found = (await client.get("/memory?q=canary")).text
        assert "owner likes &lt;b&gt;tea&lt;/b&gt;" in page and "dentist at 9" in page
        assert "GROUP-CANARY" not in page and "GROUP-CANARY" not in found


async def test_audit_filters_and_exports_what_the_filters_select(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    import csv
    import io
    import json

    from agent_core.ports import AuditEntry

    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        for actor, tool, decision in (("telegram:1", "exec", "allowed"), ("telegram:77", "exec", "denied"),
                                      ("telegram:1", "read_file", "allowed")):  # fmt: skip
            await app.storage.audit(AuditEntry(kind="tool_call", actor=actor, session_key="main", subject=tool,
                                               detail="=cmd|' /C calc'!A0", decision=decision))  # fmt: skip
        async with logged_in(d) as client:
            page = (await client.get("/audit?tool=exec&decision=denied")).text
            assert "telegram:77" in page and "telegram:1<" not in page
            exported = json.loads((await client.get("/audit/export.json?tool=exec")).text)
            assert sorted(r["actor"] for r in exported) == ["telegram:1", "telegram:77"]
            response = await client.get("/audit/export.csv?actor=telegram:1")
            assert "attachment" in response.headers["content-disposition"]
            rows = list(csv.DictReader(io.StringIO(response.text)))
            assert sorted(r["subject"] for r in rows) == ["exec", "read_file"]
            assert all(r["detail"].startswith("'=") for r in rows)  # a spreadsheet shows it as text
            bad = await client.get("/audit?since=yesterday-ish")
            assert bad.status_code == 200 and "use 30m, 2h, 1d, 1w or an ISO date" in bad.text


async def test_a_page_reached_under_another_host_name_is_refused(tmp_path: Path, fake_api: FakeAnthropic) -> None:
    # DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own Host.
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT) as (app, _), dashboard(app) as d:
        async with httpx.AsyncClient(base_url=d.base) as client:
            rebound = await client.get(f"/login?token={d.token}", headers={"host": "evil.example"})
            assert rebound.status_code == 400 and "set-cookie" not in rebound.headers
            assert (await client.get(f"/login?token={d.token}", headers={"host": "localhost:8765"})).status_code == 303


async def test_the_overview_shows_mcp_and_voice_states_and_an_unpriced_cost_as_unknown(
    tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    """What `roost doctor` and /status say reaches the overview too; no price configured is
    "cost unknown" (as /usage says), never "$0.0000"."""
    from tests.fakes.anthropic_script import reply_text
    from tests.fakes.recording_adapter import private

    fake_api.script(reply_text("hi"))
    mcp = {"servers": {"notes": {"command": "notes-server", "enabled": False}}}
    async with running_app(tmp_path, fake_api, dashboard=LOOPBACK_ANY_PORT, mcp=mcp) as (app, adapter), dashboard(app) as d:
        await adapter.say(private(OWNER_ID, "hello"))  # a run today: its cost has no price
        await app.conversations.lanes.drain()
        async with logged_in(d) as client:
            page = (await client.get("/")).text
    assert "notes" in page and "MCP server (stdio)" in page and "disabled" in page
    assert "speech to text" in page and "text to speech" in page
    from bot.settings import local_stt_installed

    if local_stt_installed():  # the local engine is named as itself, not by a service's model
        assert "PocketSphinx" in page and "whisper-1" not in page
    assert "cost unknown" in page and "$0.0000" not in page
