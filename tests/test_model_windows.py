"""Per-model windows: compaction triggers from the window of the model actually used, and
failing over from a 1M-window model to a 200k one compacts first instead of sending a request
that cannot fit — through the real loop, FailoverLLM, the SDK and the strict fake."""

from __future__ import annotations

import json
from typing import Any

from agent_core.compaction import FLUSH_PROMPT, SUMMARY_HEADER, SUMMARY_SYSTEM, CompactionConfig, Compactor
from agent_core.models import ModelFacts, ModelTable
from tests.failover_rig import ANSWER, BACKUP, PRIMARY, finished, make_rig
from tests.fakes.anthropic_models import FakeModel
from tests.fakes.anthropic_script import Error, Reply, reply_text

BIG, SMALL = 1_000_000, 200_000
SUMMARY = "## Active task\n- answering the capital question"


def _sent(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


async def test_failover_from_1m_window_to_200k_compacts_first_and_loses_nothing(fake_api, tmp_path) -> None:
    table = ModelTable({PRIMARY: ModelFacts(context_window=BIG), BACKUP: ModelFacts(context_window=SMALL)})
    rig = await make_rig(fake_api, tmp_path, facts=table)
    fake_api.models[PRIMARY] = FakeModel(PRIMARY, PRIMARY, context_window=BIG)
    fake_api.models[BACKUP] = FakeModel(BACKUP, BACKUP, context_window=SMALL)
    try:
        # ~400k tokens of history: fits the primary's window, twice the backup's.
        for i in range(100):
            await rig.core.storage.append_message("main", None, "user", [{"type": "text", "text": f"Turn {i}. " + "word " * 3200}])
            await rig.core.storage.append_message("main", None, "assistant", [{"type": "text", "text": f"Noted {i}."}])
        rig.core.loop.compactor = Compactor(rig.core.loop._llm, rig.core.storage, CompactionConfig(keep_recent_tokens=20_000))

        def respond(body: dict[str, Any]) -> Reply | Error:
            if body["model"] == PRIMARY:
                return Error(529)
            if FLUSH_PROMPT in _sent(body):
                return reply_text("nothing to save")
            if any(SUMMARY_SYSTEM in b.get("text", "") for b in body.get("system") or []):
                return reply_text(SUMMARY)
            return reply_text(ANSWER)

        fake_api.responder = respond
        events, visible = await rig.run("and the capital?")
        done = finished(events)
        assert done.model == BACKUP and visible.startswith(ANSWER)
        answered = fake_api.requests[-1]
        assert answered.json["model"] == BACKUP and answered.status == 200
        assert SUMMARY_HEADER in _sent(answered.json) and "Turn 99." in _sent(answered.json)
        # No request was refused for its size: the backup was never sent what could not fit.
        assert not any("prompt is too long" in (r.error or "") for r in fake_api.requests)
        # Nothing lost: every stored message is still there, plus the question and answer.
        assert len(await rig.core.storage.load_transcript("main")) == 200 + 2
        latest, _ = await rig.core.storage.compaction_state("main")
        assert latest is not None and latest.ok
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()


async def test_compaction_triggers_from_the_window_of_the_model_used(fake_api, tmp_path) -> None:
    # The same 60k-token history: under 75 % of a 1M window, over 75 % of a 64k one.
    for window, compacts in ((BIG, False), (64_000, True)):
        rig = await make_rig(fake_api, tmp_path / str(window), fallbacks=(),
                             facts=ModelTable({PRIMARY: ModelFacts(context_window=window)}))
        try:
            for i in range(15):
                await rig.core.storage.append_message("main", None, "user", [{"type": "text", "text": f"Turn {i}. " + "word " * 3200}])
                await rig.core.storage.append_message("main", None, "assistant", [{"type": "text", "text": f"Noted {i}."}])
            rig.core.loop.compactor = Compactor(rig.core.loop._llm, rig.core.storage, CompactionConfig(keep_recent_tokens=5_000))
            fake_api.reset()

            def respond(body: dict[str, Any]) -> Reply:
                if any(SUMMARY_SYSTEM in b.get("text", "") for b in body.get("system") or []):
                    return reply_text(SUMMARY)
                return reply_text("ok" if FLUSH_PROMPT not in _sent(body) else "nothing to save")

            fake_api.responder = respond
            events, _ = await rig.run("next?")
            finished(events)
            latest, _ = await rig.core.storage.compaction_state("main")
            assert (latest is not None) is compacts, window
        finally:
            await rig.llm.aclose()
            await rig.core.llm.aclose()
            await rig.core.storage.aclose()


async def test_near_the_threshold_the_real_token_count_decides_not_a_guess(fake_api, tmp_path) -> None:
    # Partly CJK text: about a token a character (the fake weighs it so), which chars/4
    # undercounts. ~32k real tokens, over the 30k threshold; ~20k by the guess (inside the
    # band where a guess would decide, under the history budget): counted, it compacts.
    window = 40_000
    rig = await make_rig(fake_api, tmp_path, fallbacks=(), facts=ModelTable({PRIMARY: ModelFacts(context_window=window)}))
    try:
        for i in range(8):
            await rig.core.storage.append_message("main", None, "user", [{"type": "text", "text": f"Turn {i}. " + "字" * 2000 + " word" * 1500}])
            await rig.core.storage.append_message("main", None, "assistant", [{"type": "text", "text": f"Noted {i}."}])
        rig.core.loop.compactor = Compactor(rig.core.loop._llm, rig.core.storage, CompactionConfig(keep_recent_tokens=2_000))

        def respond(body: dict[str, Any]) -> Reply:
            if any(SUMMARY_SYSTEM in b.get("text", "") for b in body.get("system") or []):
                return reply_text(SUMMARY)
            return reply_text("ok" if FLUSH_PROMPT not in _sent(body) else "nothing to save")

        fake_api.responder = respond
        finished((await rig.run("next?"))[0])
        assert any(r.path.endswith("/count_tokens") for r in fake_api.requests), "asked for the real count"
        latest, _ = await rig.core.storage.compaction_state("main")
        assert latest is not None, "the real count is over the threshold: compacted"
    finally:
        await rig.llm.aclose()
        await rig.core.llm.aclose()
        await rig.core.storage.aclose()
