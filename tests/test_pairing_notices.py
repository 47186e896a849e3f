"""Pairing notices: the owner hears about a code once; a stranger who keeps writing is re-told
their code at most once per PAIRING_RETELL (time injected, nothing waits)."""

from __future__ import annotations

from datetime import timedelta

from agent_core.inbound import Inbound
from bot.router import PAIRING_RETELL, NeedsPairing, Router
from bot.storage import Storage
from tests.storage_fixtures import FakeClock


def stranger(user: str) -> Inbound:
    return Inbound("telegram", "private", user, user, f"user{user}", "let me in")


async def test_a_stranger_writing_fast_is_told_once_per_window_and_the_owner_once_per_code(tmp_path) -> None:
    clock = FakeClock()
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}", clock=clock)
    try:
        router = Router(storage, owners=["telegram:1"], allowed_groups={}, now=clock)
        first = await router.route(stranger("42"))
        assert isinstance(first, NeedsPairing) and first.code and first.new and first.tell_sender
        again = [await router.route(stranger("42")) for _ in range(5)]
        assert all(r == NeedsPairing(first.code, new=False, tell_sender=False) for r in again)

        clock.advance(PAIRING_RETELL + timedelta(seconds=1))
        later = await router.route(stranger("42"))
        assert later == NeedsPairing(first.code, new=False, tell_sender=True)  # re-told, owner not

        # The platform's pending-code limit: the fourth stranger is told to wait, also once.
        for user in ("43", "44"):
            assert (await router.route(stranger(user))).new
        full = [await router.route(stranger("45")) for _ in range(3)]
        assert [(r.code, r.new, r.tell_sender) for r in full] == [(None, False, True), (None, False, False), (None, False, False)]
    finally:
        await storage.aclose()
