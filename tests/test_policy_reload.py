"""Hot reload of roost.toml's [policy] and [limits]: a valid edit applies at once, an invalid
one is rejected with one log line naming the key and the last good configuration stays."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_core.approvals import Decision
from agent_core.risk import Risk, Scope, Verdict
from bot.limit_settings import LimitSettings
from bot.live_config import LiveConfig
from bot.policy_settings import PolicySettings
from tests.runner_harness import runner_harness

GROUP = "group:telegram:-100"
WAIT_S = 10.0

START = """
[agent]
max_turns = 5

[policy.sub.tools]
web_fetch = "deny"
"""

WORK_GROUP_GETS_THE_WEB = START + """
[policy.groups."telegram:-100"]
tools = { web_fetch = "allow" }
"""


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[LiveConfig]:
    path = tmp_path / "roost.toml"
    path.write_text(START)
    config = LiveConfig(
        path,
        policy=PolicySettings.model_validate({"sub": {"tools": {"web_fetch": "deny"}}}),
        limits=LimitSettings(),
        known_tools=["web_fetch", "exec", "read_file"],
        interval_s=0.01,  # the poll; tests wait on the reload itself, never on time
    )
    async with config:
        yield config


async def edit(live: LiveConfig, text: str) -> None:
    seen = live.checks
    live.path.write_text(text)
    await live.wait_checked(seen, WAIT_S)


async def test_a_valid_edit_applies_without_restart(live: LiveConfig, tmp_path: Path) -> None:
    async with runner_harness(tmp_path, policy=lambda: live.policy) as runner:
        url = {"url": "https://example.org"}
        assert (await runner.call("web_fetch", url, session_key=GROUP, scope=Scope.SUB)).is_error
        await edit(live, WORK_GROUP_GETS_THE_WEB)
        assert not (await runner.call("web_fetch", url, session_key=GROUP, scope=Scope.SUB)).is_error
        assert runner.ran("web_fetch") == ["https://example.org"]


async def test_an_invalid_edit_is_rejected_with_one_line_naming_the_key(
    live: LiveConfig, caplog: pytest.LogCaptureFixture
) -> None:
    await edit(live, WORK_GROUP_GETS_THE_WEB)
    good = live.policy
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bot.live_config"):
        await edit(live, WORK_GROUP_GETS_THE_WEB + 'exec = "allow"\n')
    [line] = [r.getMessage() for r in caplog.records]
    assert "policy.groups.telegram:-100.exec: exec in a group is always asked" in line
    assert "keeping the last good" in line
    # the last good policy stays in force
    assert live.policy is good
    assert live.policy.decide(Scope.SUB, GROUP, "web_fetch", Risk.READ).verdict is Verdict.ALLOW
    assert live.policy.decide(Scope.SUB, GROUP, "exec", Risk.EXEC).verdict is Verdict.DENY


async def test_a_toml_syntax_error_keeps_the_last_good_policy(
    live: LiveConfig, caplog: pytest.LogCaptureFixture
) -> None:
    good = live.policy
    with caplog.at_level(logging.WARNING, logger="bot.live_config"):
        await edit(live, "[policy.sub\nweb_fetch = allow\n")
    assert live.policy is good and live.last_error is not None
    assert [r.getMessage() for r in caplog.records][0].startswith("config.reload_rejected: roost.toml:")
    # the next valid edit applies again
    await edit(live, WORK_GROUP_GETS_THE_WEB)
    assert live.last_error is None
    assert live.policy.decide(Scope.SUB, GROUP, "web_fetch", Risk.READ).verdict is Verdict.ALLOW


async def test_limits_reload_and_a_bad_limit_names_its_key(
    live: LiveConfig, caplog: pytest.LogCaptureFixture
) -> None:
    await edit(live, START + "\n[limits]\ntool_calls_per_run = 3\n")
    assert live.limits.tool_calls_per_run == 3
    with caplog.at_level(logging.WARNING, logger="bot.live_config"):
        await edit(live, START + "\n[limits]\ntool_calls_per_run = -1\n")
    assert "limits.tool_calls_per_run: Input should be greater than or equal to 0" in caplog.text
    assert live.limits.tool_calls_per_run == 3


async def test_the_tool_call_cap_follows_the_live_limits(live: LiveConfig, tmp_path: Path) -> None:
    await edit(live, START + "\n[limits]\ntool_calls_per_run = 2\n")
    cap = lambda ctx: live.limits.tool_calls_per_run  # noqa: E731
    async with runner_harness(tmp_path, call_cap=cap) as runner:
        outcomes = [await runner.call("reader", {"text": str(i)}, run_id="r1") for i in range(3)]
        assert [o.is_error for o in outcomes] == [False, False, True]
        assert "limit of 2 tool calls" in outcomes[2].content
        assert runner.audit.entries[-1].status == "denied"
        # another run starts its own count
        assert not (await runner.call("reader", {"text": "x"}, run_id="r2")).is_error
        await edit(live, START + "\n[limits]\ntool_calls_per_run = 0\n")  # 0 = unlimited
        assert not (await runner.call("reader", {"text": "4"}, run_id="r1")).is_error


async def test_unknown_tool_names_are_logged_not_rejected(
    live: LiveConfig, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.live_config"):
        await edit(live, START + '\n[policy.groups."telegram:-100".tools]\nweb_fetc = "allow"\n')
    assert "policy.groups.telegram:-100.tools.web_fetc" in caplog.text
    assert "telegram:-100" in live.policy.groups


async def test_closing_the_watcher_ends_its_task(tmp_path: Path) -> None:
    path = tmp_path / "roost.toml"
    path.write_text(START)
    config = LiveConfig(path, policy=PolicySettings(), limits=LimitSettings(), interval_s=0.01)
    await config.start()
    assert any(t.get_name() == "live-config" for t in asyncio.all_tasks())
    await config.aclose()
    await config.aclose()  # idempotent
    assert not any(t.get_name() == "live-config" for t in asyncio.all_tasks())
    with pytest.raises(RuntimeError):
        await config.start()


async def test_an_approval_follows_a_reload_from_ask_to_allow(live: LiveConfig, tmp_path: Path) -> None:
    async with runner_harness(tmp_path, policy=lambda: live.policy) as runner:
        runner.decision = Decision.ONCE
        await runner.call("exec", {"command": "ls"})
        await edit(live, START + '\n[policy.main]\nexec = "allow"\n')
        await runner.call("exec", {"command": "ls"})
        assert len(runner.asked) == 1 and runner.ran("exec") == ["ls", "ls"]


def test_the_owner_is_exempt_from_the_tool_call_cap_unless_configured(tmp_path: Path) -> None:
    from agent_core.tools import ToolContext
    from bot.live_config import tool_call_cap

    main = ToolContext("main", Scope.MAIN, tmp_path)
    group = ToolContext(GROUP, Scope.SUB, tmp_path)
    assert (tool_call_cap(LimitSettings(), main), tool_call_cap(LimitSettings(), group)) == (0, 50)
    strict = LimitSettings(owner_exempt=False, tool_calls_per_run=7)
    assert (tool_call_cap(strict, main), tool_call_cap(strict, group)) == (7, 7)
