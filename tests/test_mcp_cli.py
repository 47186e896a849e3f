"""`roost mcp list | tools | test` as the owner runs them (subprocesses), and `[mcp]` hot
reload in a running app: a server added appears, one removed is gone with its child."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.mcp_support import ROOT, calls, free_port, settled
from tests.telegram_harness import OWNER, running, tg  # noqa: F401  (fixture)
from tests.test_cli_admin import env_for, roost

SECRET = "cli-s3cret-header-value-77"


def toml(record: Path, dead_port: int) -> str:
    return f"""
[mcp.servers.notes]
command = "{sys.executable}"
args = ["-m", "tests.fakes.mcp_server", "--record", "{record}"]
cwd = "{ROOT}"
env = {{ NOTES_TOKEN = "${{ROOST_TEST_MCP_SECRET}}" }}
tools = {{ exclude = ["delete_*", "crash", "add_tool"] }}
risk_of = {{ search = "read" }}

[mcp.servers.gone]
url = "http://127.0.0.1:{dead_port}/mcp"
headers = {{ Authorization = "Bearer ${{ROOST_TEST_MCP_SECRET}}" }}
"""


def test_mcp_list_tools_and_test_show_states_and_never_a_secret(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "roost.toml").write_text(toml(tmp_path / "calls.jsonl", free_port()))
    env = env_for(home, ROOST_TEST_MCP_SECRET=SECRET)

    listed = roost("mcp", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "notes: connected (stdio, 7 tools, risk exec)" in listed.stdout
    assert "gone: failed (http, 0 tools" in listed.stdout and "last error:" in listed.stdout
    assert "${ROOST_TEST_MCP_SECRET}" not in listed.stdout  # targets as configured: no headers shown

    tools = roost("mcp", "tools", "notes", env=env)
    assert tools.returncode == 0, tools.stderr
    assert "mcp__notes__search  [read]" in tools.stdout and "mcp__notes__get_note  [exec]" in tools.stdout
    assert "delete_note" not in tools.stdout

    assert roost("mcp", "test", "notes", env=env).returncode == 0
    failed = roost("mcp", "test", "gone", env=env)
    assert failed.returncode == 1 and "gone: failed" in failed.stdout
    assert roost("mcp", "test", "nope", env=env).returncode == 2
    for result in (listed, tools, failed):
        assert SECRET not in result.stdout + result.stderr


async def test_doctor_shows_each_servers_state(tmp_path: Path, monkeypatch) -> None:
    from bot.doctor import run_checks
    from bot.settings import Settings

    monkeypatch.setenv("ROOST_TEST_MCP_SECRET", SECRET)
    config = tmp_path / "roost.toml"
    config.write_text(toml(tmp_path / "calls.jsonl", free_port()))
    monkeypatch.setenv("ROOST_CONFIG", str(config))
    (check,) = [c for c in await run_checks(Settings(home=tmp_path / "home")) if c.name == "mcp"]
    assert check.status == "warn" and "notes connected (7 tools)" in check.detail and "gone failed" in check.detail
    assert check.fix.startswith("roost mcp test gone") and SECRET not in check.detail


def test_an_invalid_mcp_table_is_one_line_naming_the_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "roost.toml").write_text('[mcp.servers.notes]\nurl = "http://x/mcp"\ncommand = "npx"\n')
    result = roost("mcp", "list", env=env_for(home))
    assert result.returncode != 0
    assert "mcp.servers.notes: set either command (a stdio server) or url" in result.stderr


async def test_hot_reload_adds_a_server_and_removing_it_ends_its_child(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, monkeypatch
) -> None:
    config = tmp_path / "roost.toml"
    config.write_text("")
    monkeypatch.setenv("ROOST_CONFIG", str(config))
    monkeypatch.setenv("ROOST_TEST_MCP_SECRET", SECRET)
    record = tmp_path / "calls.jsonl"
    async with running(tmp_path, tg, fake_api, paced=False) as h:
        assert h.app.mcp is not None and h.app.mcp.states() == []
        config.write_text(toml(record, free_port()).split("[mcp.servers.gone]")[0])
        assert await h.app.live.check()
        assert await settled(h.app.mcp, "notes") == "connected"
        tg.send_private(OWNER, "hello")
        await h.bot_text(OWNER, lambda t: "hello" in t)
        tg.send_private(OWNER, "/status")
        await h.bot_text(OWNER, lambda t: "MCP: notes connected (7 tools)" in t)
        offered = [t["name"] for t in fake_api.requests[0].json["tools"]]
        assert "mcp__notes__search" in offered and "mcp__notes__delete_note" not in offered
        await h.app.agent._tools.get("mcp__notes__search").func(  # the child's pid, from its record
            h.app.agent._tools.get("mcp__notes__search").input_model.model_validate({"query": "pid"}), None
        )
        pid = calls(record)[0]["pid"]

        config.write_text("# no servers\n")
        assert await h.app.live.check()
        assert h.app.mcp.states() == []
        tg.send_private(OWNER, "again")
        await h.bot_text(OWNER, lambda t: "again" in t)
        assert not [t["name"] for t in fake_api.requests[1].json["tools"] if t["name"].startswith("mcp__")]
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pass
        else:
            raise AssertionError(f"the removed server's child {pid} is still running")
