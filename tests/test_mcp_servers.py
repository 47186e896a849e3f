"""MCP connections against real servers (the SDK's own server side, tests/fakes/mcp_server.py)
over stdio and streamable HTTP: reconnect and retry once, timeouts, a child's environment."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from agent_core.policy import Policy
from agent_core.risk import Risk, Scope
from agent_core.tools import ToolContext, ToolError, ToolRegistry
from bot.mcp_servers import McpManager, input_schema, tool_name
from bot.mcp_settings import McpSettings
from tests.mcp_support import calls, free_port, http_server, listening, settled, stdio_server

SECRET = "s3cret-notes-token-4711"


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext("main", Scope.MAIN, tmp_path)


async def invoke(registry: ToolRegistry, name: str, args: dict, tmp_path: Path):  # noqa: ANN201
    tool = registry.get(name)
    assert tool is not None, f"{name} not registered: {registry.names()}"
    return await tool.func(tool.input_model.model_validate(args), ctx(tmp_path))


def mcp_names(registry: ToolRegistry) -> list[str]:
    return [n for n in registry.names() if n.startswith("mcp__")]


def settings(**servers: dict) -> McpSettings:
    return McpSettings.model_validate({"servers": servers})


async def test_a_stdio_server_that_exits_is_restarted_and_the_call_retried_once(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    registry = ToolRegistry()
    manager = McpManager(registry, Policy, backoff_min_s=0.05)
    try:
        await manager.apply(settings(notes=stdio_server(record)))
        assert await settled(manager, "notes") == "connected"
        await invoke(registry, "mcp__notes__search", {"query": "one"}, tmp_path)
        first_pid = calls(record)[0]["pid"]
        os.kill(first_pid, signal.SIGKILL)  # the server dies between two calls

        out = await invoke(registry, "mcp__notes__search", {"query": "two"}, tmp_path)
        assert "'two'" in out.text
        searches = [c for c in calls(record) if c["tool"] == "search"]
        assert [c["args"]["query"] for c in searches] == ["one", "two"]
        assert searches[1]["pid"] != first_pid and manager.links["notes"].connects == 2
    finally:
        await manager.aclose()


async def test_the_http_server_restarted_mid_session_is_reconnected_and_the_call_succeeds(tmp_path: Path) -> None:
    record, port = tmp_path / "calls.jsonl", free_port()
    registry = ToolRegistry()
    manager = McpManager(registry, Policy, backoff_min_s=0.05)
    try:
        with http_server(record, port):
            await listening(port)
            await manager.apply(settings(notes={"url": f"http://127.0.0.1:{port}/mcp", "timeout_s": 20}))
            assert await settled(manager, "notes") == "connected"
            await invoke(registry, "mcp__notes__search", {"query": "before"}, tmp_path)
        # Killed; a new process on the same port knows nothing of the old session.
        with http_server(record, port):
            await listening(port)
            out = await invoke(registry, "mcp__notes__search", {"query": "after"}, tmp_path)
        assert "'after'" in out.text
        assert [c["args"]["query"] for c in calls(record)] == ["before", "after"]
        assert manager.links["notes"].connects == 2
    finally:
        await manager.aclose()




async def test_a_stdio_child_sees_only_its_own_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-roost-own-key")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:roost-own-telegram-token-abcdefghijkl")
    monkeypatch.setenv("NOTES_TOKEN_SOURCE", SECRET)
    record = tmp_path / "calls.jsonl"
    registry = ToolRegistry()
    manager = McpManager(registry, Policy)
    try:
        await manager.apply(settings(notes=stdio_server(record, env={"NOTES_TOKEN": "${NOTES_TOKEN_SOURCE}"})))
        assert await settled(manager, "notes") == "connected"
        names = json.loads((await invoke(registry, "mcp__notes__environment", {}, tmp_path)).text.split("\n")[1])
        assert "NOTES_TOKEN" in names
        assert not {"ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "NOTES_TOKEN_SOURCE"} & set(names)
        # The value it was given reaches the server but never comes back to the model.
        echoed = (await invoke(registry, "mcp__notes__echo_env", {"name": "NOTES_TOKEN"}, tmp_path)).text
        assert SECRET not in echoed and "NOTES_TOKEN=[redacted]" in echoed
        # Its own process group: ending Roost's group never races the child's.
        pid = calls(record)[0]["pid"]
        assert os.getpgid(pid) == pid
    finally:
        await manager.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended with Roost


async def test_an_unset_variable_fails_the_server_with_one_line_naming_it(tmp_path: Path) -> None:
    registry = ToolRegistry()
    manager = McpManager(registry, Policy)
    try:
        await manager.apply(settings(gh=stdio_server(tmp_path / "r", env={"GITHUB_TOKEN": "${ROOST_TEST_UNSET_VAR}"})))
        assert await settled(manager, "gh") == "failed"
        (state,) = manager.states()
        assert state.error == "env.GITHUB_TOKEN: ${ROOST_TEST_UNSET_VAR} is not set in Roost's environment"
        assert mcp_names(registry) == []
        with pytest.raises(ToolError):
            await manager.links["gh"].call("search", {}, 0.5)
    finally:
        await manager.aclose()


async def test_filters_risks_and_names(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    registry = ToolRegistry()
    manager = McpManager(registry, Policy)
    try:
        config = stdio_server(record, tools={"include": ["search", "get_*", "delete_*"], "exclude": ["delete_*"]},
                              risk="read", risk_of={"get_note": "write"})  # fmt: skip
        await manager.apply(settings(notes=config))
        assert await settled(manager, "notes") == "connected"
        assert mcp_names(registry) == ["mcp__notes__search", "mcp__notes__get_note"]
        assert registry.get("mcp__notes__search").risk is Risk.READ
        assert registry.get("mcp__notes__get_note").risk is Risk.WRITE
        # A removed server's tools leave the registry and its child is ended.
        await manager.apply(settings())
        assert mcp_names(registry) == [] and manager.states() == []
    finally:
        await manager.aclose()


def test_names_and_schemas_fit_the_messages_api() -> None:
    import re

    assert tool_name("notes", "search") == "mcp__notes__search"
    odd = tool_name("notes", "read file/v2.1")
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", odd)
    long_a, long_b = tool_name("notes", "x" * 80 + "a"), tool_name("notes", "x" * 80 + "b")
    assert len(long_a) <= 64 and long_a != long_b
    schema = input_schema({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T",
                           "anyOf": [{"required": ["a"]}], "properties": {"a": {"type": "string"}}})  # fmt: skip
    assert schema == {"type": "object", "properties": {"a": {"type": "string"}}}
    assert input_schema(None) == {"type": "object", "properties": {}}


async def test_a_secret_of_a_server_added_while_running_is_redacted_from_logs_and_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from bot.logs import RedactSecrets

    secret = "hot-reloaded-s3cret-5521"
    monkeypatch.setenv("ROOST_TEST_HOT_SECRET", secret)
    redactor = RedactSecrets([])  # made at start-up, before the server existed
    manager = McpManager(ToolRegistry(), Policy)
    try:
        await manager.apply(settings(late=stdio_server(tmp_path / "r", env={"T": "${ROOST_TEST_HOT_SECRET}"})))
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "token is %s", (secret,), None)
        redactor.filter(record)
        assert secret not in record.getMessage()
        assert secret not in redactor.redact(f'{{"text": "{secret}"}}')  # the audit trail's redactor
    finally:
        await manager.aclose()


async def test_an_old_http_sse_server_is_reached_through_its_sse_url(tmp_path: Path) -> None:
    record, port = tmp_path / "calls.jsonl", free_port()
    registry = ToolRegistry()
    manager = McpManager(registry, Policy)
    try:
        with http_server(record, port, sse=True):
            await listening(port)
            await manager.apply(settings(old={"url": f"http://127.0.0.1:{port}/sse", "risk": "read"}))
            assert await settled(manager, "old") == "connected", manager.states()
            assert manager.states()[0].transport == "sse"
            out = await invoke(registry, "mcp__old__search", {"query": "legacy"}, tmp_path)
        assert "'legacy'" in out.text and [c["tool"] for c in calls(record)] == ["search"]
    finally:
        await manager.aclose()


async def test_a_call_to_a_server_that_stays_down_fails_after_one_reconnect_not_at_its_timeout(tmp_path: Path) -> None:
    import asyncio

    record, port = tmp_path / "calls.jsonl", free_port()
    registry = ToolRegistry()
    manager = McpManager(registry, Policy, backoff_min_s=0.05)
    try:
        with http_server(record, port):
            await listening(port)
            await manager.apply(settings(notes={"url": f"http://127.0.0.1:{port}/mcp", "timeout_s": 3600}))
            assert await settled(manager, "notes") == "connected"
        async with asyncio.timeout(60):  # far below the hour the call may take
            with pytest.raises(ToolError, match="MCP server notes"):
                await invoke(registry, "mcp__notes__search", {"query": "anyone?"}, tmp_path)
        assert "mcp__notes__search" in registry.names()  # still offered: it may come back
    finally:
        await manager.aclose()


async def test_a_tool_the_server_adds_while_connected_is_registered_when_it_says_so(tmp_path: Path) -> None:
    import asyncio

    record = tmp_path / "calls.jsonl"
    registry = ToolRegistry()
    manager = McpManager(registry, Policy)
    try:
        await manager.apply(settings(notes=stdio_server(record, risk="read")))
        assert await settled(manager, "notes") == "connected"
        version = registry.version
        await invoke(registry, "mcp__notes__add_tool", {"name": "fresh"}, tmp_path)
        link = manager.links["notes"]
        async with asyncio.timeout(30), link._changed:  # the refresh runs in the link's task
            await link._changed.wait_for(lambda: registry.get("mcp__notes__fresh") is not None)
        assert registry.version > version
        assert "fresh ran" in (await invoke(registry, "mcp__notes__fresh", {}, tmp_path)).text
        assert manager.links["notes"].connects == 1  # refreshed, not reconnected
    finally:
        await manager.aclose()


async def test_an_invalid_mcp_edit_is_refused_with_one_line_naming_the_key_and_servers_stay(tmp_path: Path) -> None:
    from bot.limit_settings import LimitSettings
    from bot.live_config import LiveConfig
    from bot.policy_settings import PolicySettings

    path = tmp_path / "roost.toml"
    good = '[mcp.servers.notes]\nurl = "http://127.0.0.1:9/mcp"\n'
    path.write_text(good)
    applied: list[McpSettings] = []

    async def on_mcp(mcp: McpSettings) -> None:
        applied.append(mcp)

    live = LiveConfig(path, policy=PolicySettings(), limits=LimitSettings(), mcp=McpSettings.model_validate(
        {"servers": {"notes": {"url": "http://127.0.0.1:9/mcp"}}}), on_mcp=on_mcp)  # fmt: skip
    path.write_text(good + 'risk = "sometimes"\n')
    assert not await live.check()
    assert live.last_error is not None and live.last_error.startswith("mcp.servers.notes.risk: Input should be")
    assert ";" not in live.last_error and applied == [] and "notes" in live.mcp.servers
    path.write_text(good + '[mcp.servers.more]\ncommand = "true"\n')
    assert await live.check()
    assert [sorted(m.servers) for m in applied] == [["more", "notes"]]


def test_a_groups_scheduled_and_isolated_runs_get_the_servers_its_chat_was_given() -> None:
    from bot.policy_settings import PolicySettings

    policy = PolicySettings.model_validate({"groups": {"telegram:-100": {"mcp": ["notes"]}}}).to_policy()
    for key in ("group:telegram:-100", "group:telegram:-100:7", "group:telegram:-100:job-ab12"):
        assert policy.mcp_offered(Scope.SUB, key, "notes"), key
        assert policy.decide(Scope.SUB, key, "mcp__notes__search", Risk.READ).verdict.value == "allow"
    assert not policy.mcp_offered(Scope.SUB, "group:telegram:-100", "github")
    assert not policy.mcp_offered(Scope.SUB, "group:telegram:-200:job-ab12", "notes")
    assert policy.decide(Scope.SUB, "group:telegram:-200", "mcp__notes__search", Risk.READ).source == "policy.sub.mcp"
    assert policy.mcp_offered(Scope.MAIN, "main:job-ab12", "notes")
