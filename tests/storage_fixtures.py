"""Fixtures that run every storage test on SQLite and on a real PostgreSQL server.

Import them into a test module (`from tests.storage_fixtures import clock, db_url, storage`).
`db_url` is parametrized over ["sqlite", "postgres"]: SQLite gets a fresh file under tmp_path;
PostgreSQL gets a freshly created database per test (dropped afterwards) on the server named
by ROOST_TEST_POSTGRES_URL (see .ci/postgres.sh), or the test is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from bot.storage import Storage

POSTGRES_ENV = "ROOST_TEST_POSTGRES_URL"
DIALECTS = ["sqlite", "postgres"]

# Remember why PostgreSQL is unusable, so an unreachable server costs one timeout, not one
# per test.
_postgres_unavailable: str | None = None


class FakeClock:
    """Injected clock: returns `now` until a test moves it."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now


def _asyncpg_dsn(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@asynccontextmanager
async def fresh_postgres_database() -> AsyncIterator[str]:
    """Create a uniquely named empty database, yield its SQLAlchemy URL, drop it after."""
    global _postgres_unavailable
    if _postgres_unavailable is not None:
        pytest.skip(f"PostgreSQL not available: {_postgres_unavailable}")
    raw = os.environ.get(POSTGRES_ENV)
    if not raw:
        _postgres_unavailable = f'{POSTGRES_ENV} is not set (run: eval "$(bash .ci/postgres.sh)")'
        pytest.skip(f"PostgreSQL not available: {_postgres_unavailable}")
    base = make_url(raw)
    try:
        admin = await asyncpg.connect(_asyncpg_dsn(base), timeout=5)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        _postgres_unavailable = f"cannot connect to {base.render_as_string()}: {exc!r}"
        pytest.skip(f"PostgreSQL not available: {_postgres_unavailable}")
    name = f"roost_t_{uuid.uuid4().hex[:16]}"
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            await _drop_database(admin, name)
    finally:
        await admin.close()


DROP_ATTEMPTS = 25
DROP_RETRY_S = 0.2


async def _drop_database(admin: asyncpg.Connection, name: str) -> None:
    """Drop a test's database; clean-up never fails the test. FORCE ends the connections a
    test that failed mid-way may leave behind; an autovacuum worker connected to the new
    database may still be refused to us ("must be a member of the role whose process is
    being terminated or member of pg_signal_backend", when .ci/postgres.sh could not grant
    that role): it finishes within moments, so try again, and at worst leave the database
    (named roost_t_*) with a warning."""
    for attempt in range(DROP_ATTEMPTS):
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except (asyncpg.InsufficientPrivilegeError, asyncpg.ObjectInUseError) as exc:
            last: Exception = exc
        except (OSError, asyncpg.PostgresError) as exc:  # the server itself went away
            last = exc
            break
        if attempt + 1 < DROP_ATTEMPTS:
            await asyncio.sleep(DROP_RETRY_S)  # timing-ok: clean-up waiting out autovacuum, not a test race
    warnings.warn(f"test database {name} left behind: {last!r}", stacklevel=1)


@pytest.fixture(params=DIALECTS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """URL of an EMPTY database (never migrated) of the parametrized dialect."""
    if request.param == "sqlite":
        # A directory that does not exist yet: the engine must create it.
        yield f"sqlite+aiosqlite:///{tmp_path / 'home' / 'roost.db'}"
        return
    async with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def storage(db_url: str, clock: FakeClock) -> AsyncIterator[Storage]:
    """A migrated Storage on a fresh database, closed after the test."""
    opened = await Storage.open(db_url, clock=clock)
    try:
        yield opened
    finally:
        await opened.aclose()
