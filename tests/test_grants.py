"""'Always allow in this session' is a rule for one session, one tool and one exact input:
scoping, listing, revoking, /new, and behaviour across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.approvals import Decision
from agent_core.policy import GrantRule
from bot.storage import Storage
from tests.runner_harness import OWNER, make_runner, runner_harness


async def test_always_allow_for_echo_harmless_never_covers_another_command(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ALWAYS
        await runner.call("exec", {"command": "echo harmless"})
        runner.decision = Decision.DENY
        assert not (await runner.call("exec", {"command": "echo harmless"})).is_error  # no card
        for other in ("echo harmless; rm -rf x", "echo  harmless", "echo harmless\n", " echo harmless"):
            outcome = await runner.call("exec", {"command": other})
            assert outcome.is_error and "denied" in outcome.content, other
        assert runner.ran("exec") == ["echo harmless", "echo harmless"]
        assert [a.action for a in runner.asked] == [
            "echo harmless", "echo harmless; rm -rf x", "echo  harmless", "echo harmless\n", " echo harmless"
        ]


async def test_a_grant_covers_its_own_session_only(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ALWAYS
        await runner.call("exec", {"command": "make"})
        await runner.storage.ensure_session("main-2", "main")
        runner.decision = Decision.DENY
        other = await runner.call("exec", {"command": "make"}, session_key="main-2")
        assert other.is_error and len(runner.asked) == 2


async def test_a_stored_rule_applies_after_a_restart_to_the_same_input_only(tmp_path: Path) -> None:
    runner = await make_runner(tmp_path)
    runner.decision = Decision.ALWAYS
    await runner.call("exec", {"command": "df -h"})
    await runner.storage.aclose()

    # a new process: new storage, gate and runner over the same database
    storage = await Storage.open(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
    restarted = await make_runner(tmp_path, storage=storage)
    restarted.runs.add("run:main")  # the run row exists from before
    try:
        restarted.decision = Decision.DENY
        assert not (await restarted.call("exec", {"command": "df -h"}, run_id="run:later")).is_error
        assert restarted.asked == []
        assert (await restarted.call("exec", {"command": "df -h /"}, run_id="run:later")).is_error
        assert [a.action for a in restarted.asked] == ["df -h /"]
        [grant] = await storage.grants("main")
        assert grant.rule == GrantRule("main", "exec", "df -h") and grant.created_by == OWNER
    finally:
        await storage.aclose()


async def test_revoked_rule_asks_again(tmp_path: Path) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ALWAYS
        await runner.call("exec", {"command": "uptime"})
        [grant] = await runner.storage.grants("main")
        assert await runner.storage.revoke_grant(grant.id) == grant
        runner.decision = Decision.DENY
        assert (await runner.call("exec", {"command": "uptime"})).is_error
        assert len(runner.asked) == 2


@pytest.mark.parametrize("hidden", ["echo ok\x00; rm -rf ~", "echo \ud800"])
async def test_an_input_that_cannot_be_stored_exactly_is_never_granted(tmp_path: Path, hidden: str) -> None:
    async with runner_harness(tmp_path) as runner:
        runner.decision = Decision.ALWAYS
        await runner.call("exec", {"command": hidden})
        assert await runner.storage.grants("main") == []
