"""The PostgreSQL fixtures' clean-up never fails a test (CI failed once when an autovacuum
worker was connected to a test database being dropped WITH (FORCE))."""

from __future__ import annotations

from types import ModuleType

import asyncpg
import pytest

REFUSED = "must be a member of the role whose process is being terminated or member of pg_signal_backend"


class RefusingAdmin:
    """An admin connection whose DROP DATABASE is refused `refusals` times."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.statements: list[str] = []

    async def execute(self, sql: str) -> None:
        self.statements.append(sql)
        if len(self.statements) <= self.refusals:
            raise asyncpg.InsufficientPrivilegeError(REFUSED)


@pytest.fixture
def storage_fixtures(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # Imported here, not at the top: other modules load it as a pytest plugin, and an import
    # before that would keep pytest from rewriting its asserts.
    from tests import storage_fixtures

    monkeypatch.setattr(storage_fixtures, "DROP_RETRY_S", 0.0)
    return storage_fixtures


async def test_a_drop_refused_while_autovacuum_is_connected_is_tried_again(storage_fixtures: ModuleType) -> None:
    admin = RefusingAdmin(refusals=2)
    await storage_fixtures._drop_database(admin, "roost_t_x")  # type: ignore[arg-type]
    assert admin.statements == ['DROP DATABASE IF EXISTS "roost_t_x" WITH (FORCE)'] * 3


async def test_a_drop_refused_for_good_leaves_the_database_with_a_warning_and_never_fails_the_test(
    storage_fixtures: ModuleType,
) -> None:
    admin = RefusingAdmin(refusals=10**6)
    with pytest.warns(UserWarning, match="roost_t_y left behind"):
        await storage_fixtures._drop_database(admin, "roost_t_y")  # type: ignore[arg-type]
    assert len(admin.statements) == storage_fixtures.DROP_ATTEMPTS
