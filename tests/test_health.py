"""`GET /healthz` for a load balancer: 200 while serving with a reachable database, 503 once
stopping (SIGTERM) or when the database does not answer, 404 elsewhere."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bot.health import Health, parse_listen
from bot.storage.engine import create_engine
from tests.telegram_harness import free_port


async def get(health: Health, path: str = "/healthz") -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(f"http://127.0.0.1:{health.port}{path}", timeout=10)


async def test_healthz_is_ok_while_serving_and_503_once_stopping(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    health = Health(engine)
    await health.start("127.0.0.1:0")
    try:
        ok = await get(health)
        assert (ok.status_code, ok.text) == (200, "ok\n")
        assert (await get(health, "/other")).status_code == 404
        health.stopping = True  # SIGTERM: the proxy must stop sending webhooks here
        stopping = await get(health)
        assert (stopping.status_code, stopping.text) == (503, "stopping\n")
    finally:
        await health.aclose()
        await engine.dispose()


async def test_healthz_is_503_when_the_database_does_not_answer_and_tells_nothing_more() -> None:
    port = free_port()  # nothing listens there
    engine = create_engine(f"postgresql+asyncpg://roost:hunter2-secret@127.0.0.1:{port}/roost")
    health = Health(engine)
    await health.start("127.0.0.1:0")
    try:
        down = await get(health)
        assert (down.status_code, down.text) == (503, "database unreachable\n")
        assert "hunter2" not in down.text
    finally:
        await health.aclose()
        await engine.dispose()


def test_health_listen_must_be_host_and_port() -> None:
    assert parse_listen("0.0.0.0:8080") == ("0.0.0.0", 8080)
    with pytest.raises(ValueError, match="host:port"):
        parse_listen("8080")
