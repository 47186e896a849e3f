"""The cache layout (LoopConfig.volatile_in_tail) through the whole app and the strict fake:
only the stable block stays in the system, the clock and today's log ride after the
conversation's cache breakpoint, and with a constant context every request after the first
reads all but its newest turn from cache (the fake's prompt-cache simulation)."""

from __future__ import annotations

import dataclasses
import shutil

from agent_core.prompt import TAIL_HEADER
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_usage import PromptCache
from tests.fakes.recording_adapter import private


async def test_volatile_context_after_the_breakpoint_keeps_the_conversation_cached(tmp_path, fake_api) -> None:
    async with running_app(tmp_path, fake_api) as (app, adapter):
        app.agent.config = dataclasses.replace(app.agent.config, volatile_in_tail=True)
        for i in range(4):
            await adapter.say(private(OWNER_ID, f"question {i} " + "words " * 200))
            await adapter.wait_for(lambda n=i: len(adapter.closed_replies()) == n + 1, timeout=15)
            await app.conversations.lanes.drain()
            # Today's log grows with every run; removed here to measure the layout alone.
            shutil.rmtree(app.settings.workspace_dir / "memory", ignore_errors=True)
        bodies = [r.json for r in fake_api.requests]
        assert all(r.status == 200 for r in fake_api.requests)  # the strict fake took each
        for body in bodies:
            assert len(body["system"]) == 1 and body["system"][0]["cache_control"]
            last = body["messages"][-1]["content"]
            assert last[-1]["text"].startswith(TAIL_HEADER) and "Current date and time" in last[-1]["text"]
            assert "cache_control" in last[-2] and "cache_control" not in last[-1]
        cache = PromptCache()
        usages = [cache.account(b) for b in bodies]
        for u in usages[1:]:
            total = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
            assert u.cache_read_input_tokens / total >= 0.8, u
