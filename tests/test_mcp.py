"""MCP tools through the whole application: the fake Bot API, the strict fake Messages API and
real MCP servers (tests/fakes/mcp_server.py) — offered, called, approved, denied, audited."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.telegram_api import FakeTelegram
from tests.mcp_support import calls, settled, stdio_server
from tests.telegram_harness import GROUP, MEMBER, OWNER, Harness, running, tg  # noqa: F401  (fixture)
from tests.test_telegram_approvals import cards, press, tool_results

OTHER_GROUP = -1009876543
SECRET = "notes-s3cret-9f3a2c7e"


def offered(fake_api: FakeAnthropic, request: int) -> list[str]:
    return [t["name"] for t in fake_api.requests[request].json.get("tools", [])]


async def connected(h: Harness, name: str = "notes") -> None:
    assert h.app.mcp is not None
    assert await settled(h.app.mcp, name) == "connected", h.app.mcp.states()


async def test_a_servers_tool_reaches_the_model_and_its_text_and_image_come_back(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    record = tmp_path / "calls.jsonl"
    server = stdio_server(record, risk="read", tools={"include": ["search", "picture", "*_note"], "exclude": ["delete_*"]})
    fake_api.script(
        reply_tools(ToolUse("mcp__notes__search", {"query": "milk"}), ToolUse("mcp__notes__picture", {})),
        reply_text("You need milk."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": server}}) as h:
        await connected(h)
        tg.send_private(OWNER, "what do I need?")
        await h.says(OWNER, "You need milk.")
    names = offered(fake_api, 0)
    assert {"mcp__notes__search", "mcp__notes__picture", "mcp__notes__get_note"} <= set(names)
    assert "mcp__notes__delete_note" not in names and "mcp__notes__slow" not in names  # filters hold
    text, image = tool_results(fake_api, 1)
    assert "buy milk" in str(text["content"]) and not text.get("is_error")
    assert image["content"][1]["type"] == "image" and image["content"][1]["source"]["media_type"] == "image/png"
    assert sorted(c["tool"] for c in calls(record)) == ["picture", "search"]  # run concurrently


async def test_an_exec_risk_mcp_tool_asks_deny_never_calls_always_grants_the_exact_call(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    record = tmp_path / "calls.jsonl"
    fake_api.script(
        reply_tools(ToolUse("mcp__notes__delete_note", {"id": 7})), reply_text("Not deleted."),
        reply_tools(ToolUse("mcp__notes__delete_note", {"id": 7})), reply_text("Deleted."),
        reply_tools(ToolUse("mcp__notes__delete_note", {"id": 7})), reply_text("Deleted again."),
        reply_tools(ToolUse("mcp__notes__delete_note", {"id": 8})), reply_text("Asked for 8."),
    )  # fmt: skip
    async with running(tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": stdio_server(record)}}) as h:
        await connected(h)
        tg.send_private(OWNER, "delete note 7")
        (card,) = await cards(h)
        assert "notes" in card.text and "delete_note" in card.text and '"id": 7' in card.text
        await press(h, card, "❌ Deny")
        await h.says(OWNER, "Not deleted.")
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "denied" in str(result["content"])
        assert calls(record) == []  # the server never saw it

        tg.send_private(OWNER, "delete note 7, really")
        _, card = await cards(h, 2)
        await press(h, card, "♾ Always in this session")
        await h.says(OWNER, "Deleted.")
        assert [c["args"] for c in calls(record)] == [{"id": 7}]

        tg.send_private(OWNER, "and again")
        await h.says(OWNER, "Deleted again.")  # the exact call: no card
        assert len(await cards(h, 2)) == 2 and len(calls(record)) == 2

        tg.send_private(OWNER, "now note 8")
        *_, third = await cards(h, 3)  # another argument asks again
        assert '"id": 8' in third.text
        await press(h, third, "❌ Deny")
        await h.says(OWNER, "Asked for 8.")
        assert [c["args"]["id"] for c in calls(record)] == [7, 7]
        rows = await h.app.storage.audit_entries(session_key="main", limit=None)
    mcp_rows = [r for r in rows if r.subject == "mcp__notes__delete_note" and r.kind == "tool_call"]
    assert [r.status for r in mcp_rows] == ["denied", "ok", "ok", "denied"]


async def test_a_group_without_the_server_never_sees_its_tools_and_one_with_it_gets_read_tools(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    record = tmp_path / "calls.jsonl"
    server = stdio_server(record, risk_of={"search": "read"})  # the rest: exec
    policy = {"groups": {f"telegram:{OTHER_GROUP}": {"mcp": ["notes"]}}}
    async with running(
        tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": server}}, policy=policy
    ) as h:
        await connected(h)
        # A model that calls the tool anyway in the group without it is refused by policy.
        fake_api.script(reply_tools(ToolUse("mcp__notes__search", {"query": "owner"})), reply_text("refused"))
        tg.send_group(GROUP, MEMBER, "search the owner's notes", mention=True)
        await h.bot_text(GROUP, lambda t: t == "refused")
        assert not [n for n in offered(fake_api, 0) if n.startswith("mcp__")]
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "policy.sub.mcp" in str(result["content"])

        fake_api.script(
            reply_tools(ToolUse("mcp__notes__search", {"query": "shared"}), ToolUse("mcp__notes__delete_note", {"id": 1})),
            reply_text("searched"),
        )
        tg.send_group(OTHER_GROUP, MEMBER, "search the shared notes", mention=True)
        await h.bot_text(OTHER_GROUP, lambda t: t == "searched")
        assert "mcp__notes__search" in offered(fake_api, 2)
        search, delete = tool_results(fake_api, 3)
        assert not search.get("is_error") and delete.get("is_error")  # exec stays denied in a group
    assert [(c["tool"], c["args"].get("query")) for c in calls(record)] == [("search", "shared")]


async def test_a_hung_call_ends_at_timeout_s_with_an_error_result_and_the_chat_goes_on(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    record = tmp_path / "calls.jsonl"
    fake_api.script(reply_tools(ToolUse("mcp__notes__slow", {"seconds": 600})), reply_text("gave up"))
    server = stdio_server(record, risk="read", timeout_s=1)
    async with running(tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": server}}) as h:
        await connected(h)
        tg.send_private(OWNER, "take your time")
        await h.says(OWNER, "gave up", timeout=30)
        (result,) = tool_results(fake_api, 1)
        assert result.get("is_error") and "timed out after 1 s" in str(result["content"])
        fake_api.script(reply_tools(ToolUse("mcp__notes__search", {"query": "still there?"})), reply_text("yes"))
        tg.send_private(OWNER, "still there?")
        await h.says(OWNER, "yes", timeout=30)
        (result,) = tool_results(fake_api, 3)
        assert not result.get("is_error")


async def test_a_var_secret_never_reaches_logs_audit_requests_or_the_childs_neighbours(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("ROOST_TEST_NOTES_TOKEN", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-roost-own-key-0000")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:roost-own-telegram-token-abcdefghijkl")
    record = tmp_path / "calls.jsonl"
    server = stdio_server(record, risk="read", env={"NOTES_TOKEN": "${ROOST_TEST_NOTES_TOKEN}"})
    fake_api.script(
        reply_tools(ToolUse("mcp__notes__echo_env", {"name": "NOTES_TOKEN"}), ToolUse("mcp__notes__environment", {})),
        reply_text("checked"),
    )
    caplog.set_level(logging.DEBUG)
    async with running(tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": server}}) as h:
        await connected(h)
        tg.send_private(OWNER, "what is your token?")
        await h.says(OWNER, "checked")
        rows = await h.app.storage.audit_entries(limit=None)
    echoed, environment = tool_results(fake_api, 1)
    assert "NOTES_TOKEN=[redacted]" in str(echoed["content"])
    assert "NOTES_TOKEN" in str(environment["content"])
    for secret_name in ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "ROOST_TEST_NOTES_TOKEN"):
        assert secret_name not in str(environment["content"])  # the child's environment
    assert all(SECRET not in r.body.decode() for r in fake_api.requests)
    assert SECRET not in caplog.text
    assert rows and all(SECRET not in f"{r}" for r in rows)


async def test_a_worker_spawned_in_a_group_gets_the_servers_tools_under_the_groups_rules(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    record = tmp_path / "calls.jsonl"
    server = stdio_server(record, risk_of={"search": "read"})
    policy = {"groups": {f"telegram:{OTHER_GROUP}": {"mcp": ["notes"]}}}
    fake_api.script(
        reply_tools(ToolUse("spawn", {"name": "finder", "task": "search the notes for milk"})),
        reply_tools(ToolUse("mcp__notes__search", {"query": "milk"}), ToolUse("mcp__notes__delete_note", {"id": 1})),
        reply_text("worker found milk"),
        reply_text("the worker found milk"),
    )
    async with running(
        tmp_path, tg, fake_api, paced=False, mcp={"servers": {"notes": server}}, policy=policy
    ) as h:
        await connected(h)
        tg.send_group(OTHER_GROUP, MEMBER, "find milk in the notes", mention=True)
        await h.bot_text(OTHER_GROUP, lambda t: "the worker found milk" in t, timeout=30)
    assert "mcp__notes__search" in offered(fake_api, 1)  # the worker's own request
    search, delete = tool_results(fake_api, 2)
    assert not search.get("is_error") and delete.get("is_error")  # exec still denied in the group
    assert [c["tool"] for c in calls(record)] == ["search"]


STANDARD = ["search", "get_note", "delete_note", "picture", "slow", "broken", "environment", "echo_env", "add_tool", "crash"]


async def test_200_tools_send_a_tenth_of_their_schemas_and_find_tools_loads_the_one_needed(
    tmp_path: Path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    import json

    record = tmp_path / "calls.jsonl"
    servers = {
        f"s{n}": {**stdio_server(record, risk="read", tools={"exclude": STANDARD}),
                  "args": ["-m", "tests.fakes.mcp_server", "--record", str(record), "--many", "50", "--name", f"s{n}"]}
        for n in range(4)
    }  # fmt: skip
    fake_api.script(
        reply_tools(ToolUse("find_tools", {"query": "invoice record 31"})),
        reply_tools(ToolUse("mcp__s2__invoice_031", {"item_id": "A-7"})),
        reply_text("Invoice 31 is ok."),
    )
    async with running(tmp_path, tg, fake_api, paced=False, mcp={"servers": servers}) as h:
        for name in servers:
            await connected(h, name)
        registry = h.app.agent._tools
        full = sum(len(json.dumps(s)) for s in registry.schemas() if s["name"].startswith("mcp__"))
        assert len([n for n in registry.names() if n.startswith("mcp__")]) == 200
        tg.send_private(OWNER, "how is invoice 31 on s2?")
        await h.says(OWNER, "Invoice 31 is ok.", timeout=30)
    first = fake_api.requests[0].json["tools"]
    sent = sum(len(json.dumps(t)) for t in first if t["name"].startswith("mcp__") or t["name"] == "find_tools")
    assert sent <= full // 10, (sent, full)
    assert "find_tools" in [t["name"] for t in first]
    (found,) = tool_results(fake_api, 1)
    assert "mcp__s2__invoice_031" in str(found["content"])
    assert "mcp__s2__invoice_031" in offered(fake_api, 1)  # loaded for the rest of the run
    (result,) = tool_results(fake_api, 2)
    assert "invoice 31 for A-7: ok" in str(result["content"]) and not result.get("is_error")
    assert [c["tool"] for c in calls(record)] == ["s2_invoice_031"]
