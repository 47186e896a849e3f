"""The opt-in web search server tool (ROOST_AGENT__WEB_SEARCH): offered only where the policy
allows a `read` tool named web_search (per scope and group), its results framed as untrusted,
its blocks stored and sent back unchanged, a paused search turn continued — through the real
app, the SDK and the strict fake."""

from __future__ import annotations

import json

from agent_core import web_search
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Reply, ServerToolUse, Text, WebSearchResults, reply_text
from tests.fakes.recording_adapter import group, private

RESULTS = (("https://example.test/paris", "Paris - facts"),)


def offered(body: dict) -> bool:
    return any(t.get("name") == "web_search" for t in body.get("tools") or [])


async def test_web_search_is_offered_answered_and_sent_back_unchanged(tmp_path, fake_api: FakeAnthropic) -> None:
    fake_api.script(
        Reply(Text("Let me search."), ServerToolUse(input={"query": "capital of France"}), WebSearchResults(RESULTS),
              stop_reason="pause_turn"),
        Reply(Text(" Paris, per example.test.")),
    )  # fmt: skip
    async with running_app(tmp_path, fake_api, agent={"web_search": True}) as (app, adapter):
        await adapter.say(private(OWNER_ID, "capital of France?"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=15)
        assert adapter.closed_replies()[0].outcome.text == "Let me search. Paris, per example.test."
        first, second = (r.json for r in fake_api.requests[:2])
        assert offered(first)
        assert {k: v for k, v in first["tools"][-1].items() if k != "cache_control"} == web_search.TOOL
        assert web_search.NOTE in json.dumps(first, ensure_ascii=False), "results framed as untrusted"
        # The paused turn went back as the service sent it (its search result included).
        sent = [b for m in second["messages"] if m["role"] == "assistant" for b in m["content"]]
        assert [b["type"] for b in sent] == ["text", "server_tool_use", "web_search_tool_result"]
        assert sent[2]["content"][0]["encrypted_content"] == "enc:https://example.test/paris"
        assert second["messages"][-1]["role"] == "assistant", "a paused server-tool turn is continued as is"
        # And the stored conversation is valid on the next request.
        fake_api.responder = lambda body: reply_text("still here")
        await adapter.say(private(OWNER_ID, "thanks"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2, timeout=15)
        assert fake_api.requests[-1].status == 200
        # Its cost in /usage: the searches are counted; unpriced, the cost is unknown.
        await app.conversations.lanes.drain()
        await app.conversations.metrics.settle()
        await adapter.say(private(OWNER_ID, "/usage"))
        report = adapter.notices[-1][1]
        today = next(line for line in report.splitlines() if line.startswith("Today, total"))
        assert "web searches 1;" in today and "cost unknown" in today


def test_a_search_without_its_price_makes_the_cost_unknown() -> None:
    from agent_core.models import ModelFacts

    priced = ModelFacts(input_usd_per_mtok=3, output_usd_per_mtok=15, cache_read_usd_per_mtok=0.3,
                        cache_write_usd_per_mtok=3.75, price_source="https://example.test/pricing")  # fmt: skip
    assert priced.cost_usd(1_000_000, 0, 0, 0) == 3
    assert priced.cost_usd(1_000_000, 0, 0, 0, web_searches=2) is None
    import dataclasses

    with_search = dataclasses.replace(priced, web_search_usd_per_1k=10.0)
    assert with_search.cost_usd(1_000_000, 0, 0, 0, web_searches=2) == 3 + 0.02


async def test_web_search_off_by_default_and_denied_by_a_groups_policy(tmp_path, fake_api: FakeAnthropic) -> None:
    async with running_app(tmp_path / "off", fake_api) as (app, adapter):
        await adapter.say(private(OWNER_ID, "hi"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=15)
    assert not offered(fake_api.requests[-1].json)
    policy = {"groups": {"telegram:-100": {"tools": {"web_search": "deny"}}}}
    async with running_app(tmp_path / "on", fake_api, agent={"web_search": True}, policy=policy) as (app, adapter):
        await adapter.say(group("-100", "42", "@roost search something"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=15)
        assert not offered(fake_api.requests[-1].json), "the group's policy denies it"
        await adapter.say(group("-200", "42", "@roost search something"))
        await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2, timeout=15)
        assert offered(fake_api.requests[-1].json), "another group may (read tools are allowed in sub scopes)"
