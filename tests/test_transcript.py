"""repair() and window() keep any stored conversation valid for the Messages API."""

from __future__ import annotations

from agent_core.transcript import INTERRUPTED_RESULT, repair, window


def use(i: str) -> dict:
    return {"type": "tool_use", "id": i, "name": "t", "input": {}}


def result(i: str) -> dict:
    return {"type": "tool_result", "tool_use_id": i, "content": "ok"}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def test_orphan_tool_use_gets_an_interrupted_result() -> None:
    out = repair([{"role": "user", "content": [text("hi")]}, {"role": "assistant", "content": [use("a")]}])
    assert out[-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a", "content": INTERRUPTED_RESULT, "is_error": True}]}


def test_orphan_results_dropped_and_conversation_starts_with_user() -> None:
    out = repair([
        {"role": "assistant", "content": [use("a")]},
        {"role": "user", "content": [result("a")]},
        {"role": "assistant", "content": [text("answer")]},
    ])
    assert out == []
    out = repair([
        {"role": "user", "content": [result("zzz"), text("question")]},
        {"role": "assistant", "content": [text("answer")]},
    ])
    assert out == [{"role": "user", "content": [text("question")]}, {"role": "assistant", "content": [text("answer")]}]


def test_results_lead_their_message_and_follow_use_order() -> None:
    out = repair([
        {"role": "user", "content": [text("go")]},
        {"role": "assistant", "content": [use("a"), use("b")]},
        {"role": "user", "content": [text("also this"), result("b"), result("a"), result("a")]},
    ])
    assert [b.get("tool_use_id") or b.get("text") for b in out[-1]["content"]] == ["a", "b", "also this"]


def test_whitespace_text_blocks_are_dropped() -> None:
    out = repair([{"role": "user", "content": [text("hi")]}, {"role": "assistant", "content": [text(" \n"), use("a")]},
                  {"role": "user", "content": [result("a")]}])
    assert out[1]["content"] == [use("a")]


def test_window_keeps_newest_and_starts_at_a_plain_user_message() -> None:
    conv = []
    for i in range(5):
        conv += [{"role": "user", "content": [text(f"q{i}" + "x" * 50)]},
                 {"role": "assistant", "content": [use(f"u{i}")]},
                 {"role": "user", "content": [result(f"u{i}")]},
                 {"role": "assistant", "content": [text(f"a{i}")]}]
    out = window(conv, 400)
    assert out[0]["role"] == "user" and out[0]["content"][0]["text"].startswith("q")
    assert out[-1] == conv[-1] and len(out) < len(conv)
    assert repair(out) == out
