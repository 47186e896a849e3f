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


# ---- window: a tool_use and its tool_result are sent together or not at all -------------------

import json  # noqa: E402
import random  # noqa: E402

from agent_core.transcript import MIN_RESULT_CHARS, size_of, unique_tool_ids  # noqa: E402


def big_result(i: str, n: int) -> dict:
    return {"type": "tool_result", "tool_use_id": i, "content": "x" * n}


def assert_valid(messages: list[dict]) -> None:
    """The pairing rules of the Messages API, on messages as `window` returns them."""
    assert messages and messages[0]["role"] == "user"
    assert not any(b.get("type") == "tool_result" for b in messages[0]["content"])
    seen: set[str] = set()
    for n, message in enumerate(messages):
        uses = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
        assert not seen & set(uses) and len(set(uses)) == len(uses), "tool_use ids must be unique"
        seen |= set(uses)
        if uses:
            following = messages[n + 1]
            assert [b["tool_use_id"] for b in following["content"] if b.get("type") == "tool_result"] == uses
        if message["role"] == "user" and n > 0:
            before = [b["id"] for b in messages[n - 1]["content"] if b.get("type") == "tool_use"]
            results = [b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"]
            assert results == before


def random_conversation(rng: random.Random) -> list[dict]:
    conv: list[dict] = []
    ids = 0
    for turn in range(rng.randint(1, 6)):
        conv.append({"role": "user", "content": [text(f"question {turn} " + "q" * rng.randint(0, 3000))]})
        for _ in range(rng.randint(0, 3)):
            uses = [f"toolu_{ids + k}" for k in range(rng.randint(1, 30))]
            ids += len(uses)
            conv.append({"role": "assistant", "content": [use(u) for u in uses]})
            conv.append({"role": "user", "content": [big_result(u, rng.choice([10, 500, 16_000])) for u in uses]})
        if rng.random() < 0.7:  # a run stopped after a tool turn has no final answer
            conv.append({"role": "assistant", "content": [text(f"answer {turn}")]})
    return conv


def test_window_never_orphans_a_tool_pair_whatever_the_sizes() -> None:
    rng = random.Random(20261123)
    for case in range(150):
        conv = repair(random_conversation(rng))
        budget = rng.choice([500, 5_000, 40_000, 400_000])
        out = window(conv, budget)
        assert_valid(out)
        # The newest plain user message and everything after it are always sent.
        newest = max(i for i, m in enumerate(conv) if m["role"] == "user"
                     and not any(b.get("type") == "tool_result" for b in m["content"]))
        tail = conv[newest:]
        assert len(out) >= len(tail), case
        for sent, stored in zip(out[-len(tail):], tail, strict=True):
            assert sent["role"] == stored["role"]
            assert [b.get("tool_use_id") or b for b in sent["content"]] == [
                b.get("tool_use_id") or b for b in stored["content"]
            ], "only tool results may be shrunk"
        results = sum(1 for m in tail for b in m["content"] if b.get("type") == "tool_result")
        fixed = size_of(tail) - sum(
            len(json.dumps(b["content"])) for m in tail for b in m["content"] if b.get("type") == "tool_result"
        )
        if fixed + results * (MIN_RESULT_CHARS + 300) <= budget:
            assert size_of(out) <= budget, (case, size_of(out), budget)


def test_run_ending_after_a_huge_tool_turn_sends_the_pair_shrunk_with_a_note() -> None:
    # 30 parallel read_file-like calls at the output cap; their results exceed the budget.
    uses = [f"toolu_{i}" for i in range(30)]
    conv = [
        {"role": "user", "content": [text("read every file")]},
        {"role": "assistant", "content": [use(u) for u in uses]},
        {"role": "user", "content": [big_result(u, 16_000) for u in uses]},
        {"role": "user", "content": [text("and now?")]},
    ]
    out = window(conv, 100_000)
    assert_valid(out)
    assert out[0]["content"][0]["text"] == "read every file", "the huge turn is kept, shrunk"
    assert out[-1] == conv[-1]
    shrunk = out[2]["content"][0]["content"]
    assert len(shrunk) < 16_000 and "characters of this result were cut" in shrunk
    assert f"of 16000 characters" in shrunk
    assert size_of(out) <= 100_000
    # Without room for even a shrunk copy, the whole turn is left out, never half of it.
    assert window(conv, 3_000) == [conv[-1]]
    # As the newest turn (the run stopped right after it), it is always sent, shrunk.
    out = window(conv[:3], 20_000)
    assert_valid(out)
    assert len(out) == 3 and size_of(out) <= 20_000


def test_repeated_tool_ids_are_renamed_and_keep_their_results() -> None:
    conv = repair([
        {"role": "user", "content": [text("go")]},
        {"role": "assistant", "content": [use("toolu_1"), use("toolu_1")]},
        {"role": "user", "content": [{**result("toolu_1"), "content": "first"}, {**result("toolu_1"), "content": "second"}]},
        {"role": "assistant", "content": [text("next")]},
        {"role": "user", "content": [text("again")]},
        {"role": "assistant", "content": [use("toolu_1")]},
        {"role": "user", "content": [{**result("toolu_1"), "content": "third"}]},
    ])
    assert_valid(conv)
    assert [b["id"] for b in conv[1]["content"]] == ["toolu_1", "toolu_1_2"]
    assert [b["content"] for b in conv[2]["content"]] == ["first", "second"]
    assert conv[5]["content"][0]["id"] == "toolu_1_3"
    assert conv[6]["content"][0] == {**result("toolu_1_3"), "content": "third"}
    assert repair(conv) == conv, "repair is idempotent"


def test_unique_tool_ids_is_deterministic_and_fixes_invalid_characters() -> None:
    taken = {"toolu_1"}
    content, pairs = unique_tool_ids([use("toolu_1"), text("t"), use("call:7"), use("call:7")], taken)
    assert pairs == [("toolu_1", "toolu_1_2"), ("call:7", "call_7"), ("call:7", "call_7_2")]
    assert [b.get("id") for b in content] == ["toolu_1_2", None, "call_7", "call_7_2"]
    assert taken == {"toolu_1", "toolu_1_2", "call_7", "call_7_2"}


def test_a_photo_counts_as_its_token_cost_not_its_base64_length() -> None:
    # 150,000 characters of base64 would otherwise fill a third of the window per photo.
    from agent_core.transcript import IMAGE_CHARS, size_of

    photo = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "A" * 150_000}}
    text = {"type": "text", "text": "what is this?"}
    with_photo = size_of([{"role": "user", "content": [photo, text]}])
    without = size_of([{"role": "user", "content": [text]}])
    assert IMAGE_CHARS <= with_photo - without < IMAGE_CHARS + 200
