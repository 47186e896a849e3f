"""Batching a run's writes (begin_run, the final answer with finish_run) keeps every
durability promise: the user's message is stored before the model is called, each tool_use is
stored before its tool runs, and a crash at any write leaves a transcript that repair() makes
valid — the strict fake Messages API accepts the next run."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from agent_core.events import RunFinished, ToolStarted
from agent_core.transcript import repair
from bot.storage import Storage
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.harness import make_harness

_WRITES = frozenset(
    {"begin_run", "start_run", "append_message", "finish_run", "record_tool_call", "finish_tool_call"}
)


class _Crash(BaseException):
    """The process died: not an Exception, so no handler of the loop turns it into a reply."""


class CrashAfter:
    """The storage as a process that dies before its (n+1)-th write sees it: the first `n`
    writes happen, every later one raises _Crash without touching the database."""

    def __init__(self, storage: Storage, n: int) -> None:
        self._storage = storage
        self._left = n
        self.done: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._storage, name)
        if name not in _WRITES:
            return attr

        async def write(*args: Any, **kwargs: Any) -> Any:
            if self._left <= 0:
                raise _Crash(name)
            self._left -= 1
            self.done.append(name)
            return await attr(*args, **kwargs)

        return write


def assert_api_valid(messages: list[dict]) -> None:
    for n, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
        if uses:
            results = [b["tool_use_id"] for b in messages[n + 1]["content"] if b.get("type") == "tool_result"]
            assert results == uses


async def test_a_crash_at_any_write_leaves_a_transcript_the_next_run_can_use(tmp_path: Path) -> None:
    scenario = (reply_tools(ToolUse("big", {"count": 1}), text="Looking."), reply_text("Done."))
    with FakeAnthropic() as fake:
        k = 0
        while True:
            db = tmp_path / f"crash{k}.db"
            url = f"sqlite+aiosqlite:///{db}"
            crashing: list[CrashAfter] = []

            def wrap(storage: Storage, k: int = k) -> CrashAfter:
                crashing.append(CrashAfter(storage, k))
                return crashing[0]

            core = await make_harness(fake, tmp_path / f"c{k}", db_url=url, wrap_store=wrap)
            fake.reset()
            fake.script(*scenario)
            try:
                events = await core.run("question")
                crashed = False
            except BaseException as exc:  # noqa: BLE001  (_Crash, possibly inside a group)
                assert "_Crash" in repr(exc) or isinstance(exc, _Crash), exc
                crashed = True
            finally:
                await core.llm.aclose()
            stored = await core.storage.load_transcript("main")
            if fake.requests:
                assert stored[0]["content"] == [{"type": "text", "text": "question"}], (
                    "the model was called before the user's message was stored"
                )
            assert_api_valid(repair(stored))
            await core.storage.aclose()
            # The next start: a plain storage on the same database, the strict fake.
            after = await make_harness(fake, tmp_path / f"a{k}", db_url=url)
            try:
                fake.reset()
                fake.script(reply_text("carrying on"))
                done = (await after.run("next"))[-1]
                assert isinstance(done, RunFinished) and done.text == "carrying on", (k, crashing[0].done)
                assert fake.requests[-1].status == 200
            finally:
                await after.llm.aclose()
                await after.storage.aclose()
            if not crashed:
                assert isinstance(events[-1], RunFinished) and events[-1].text.endswith("Done.")
                break
            k += 1
    assert k == len(crashing[0].done) >= 6, "every write of the run was a crash point"


async def test_user_message_is_stored_before_the_model_is_called(tmp_path: Path) -> None:
    db = tmp_path / "roost.db"
    seen: list[list[str]] = []

    def responder(body: dict):  # noqa: ANN202  (runs on the fake's own thread)
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT role, content FROM messages ORDER BY id").fetchall()
        seen.append([f"{role}:{json.loads(content)[0].get('text', '')}" for role, content in rows])
        return reply_text("answer")

    with FakeAnthropic(responder=responder) as fake:
        core = await make_harness(fake, tmp_path, db_url=f"sqlite+aiosqlite:///{db}")
        try:
            await core.run("first")
            await core.run("second")
        finally:
            await core.llm.aclose()
            await core.storage.aclose()
    assert seen == [["user:first"], ["user:first", "assistant:answer", "user:second"]]


async def test_each_tool_use_is_stored_before_its_tool_runs(tmp_path: Path) -> None:
    with FakeAnthropic() as fake:
        core = await make_harness(fake, tmp_path)
        fake.script(reply_tools(ToolUse("sleep", {"seconds": 0.2}), ToolUse("big", {"count": 1})), reply_text("ok"))
        checked: list[str] = []

        async def on_event(event: object) -> None:
            if isinstance(event, ToolStarted):
                stored = await core.storage.load_transcript("main")
                ids = [b.get("id") for b in stored[-1]["content"]]
                assert stored[-1]["role"] == "assistant" and event.call_id in ids
                checked.append(event.call_id)

        try:
            events = await asyncio.wait_for(core.run("go", on_event=on_event), 10)
        finally:
            await core.llm.aclose()
            await core.storage.aclose()
        assert isinstance(events[-1], RunFinished) and len(checked) == 2
