"""The joiner that keeps a continued answer from showing its first words twice
(agent_core.continuation): fed chunk by chunk as a stream arrives, it shows exactly what
follows the shown text, whatever the continuation repeats."""

from __future__ import annotations

import pytest

from agent_core.continuation import CONTINUE_PROMPT, Joiner, continuation_messages

SHOWN = "The capital of France is"
FULL = "The capital of France is Paris, on the Seine."


def streamed(shown: str, continuation: str, size: int) -> str:
    joiner = Joiner(shown)
    out = "".join(joiner.feed(continuation[i : i + size]) for i in range(0, len(continuation), size))
    return out + joiner.finish()


@pytest.mark.parametrize("size", [1, 3, 7, 100])
@pytest.mark.parametrize(
    ("shown", "continuation", "after"),
    [
        (SHOWN, " Paris, on the Seine.", " Paris, on the Seine."),  # a proper continuation
        (SHOWN, FULL, " Paris, on the Seine."),  # restarted from the top
        (SHOWN, "France is Paris, on the Seine.", " Paris, on the Seine."),  # repeats the last words
        (SHOWN + " ", "Paris, on the Seine.", "Paris, on the Seine."),  # a trailing space shown
        (SHOWN + " ", " Paris, on the Seine.", "Paris, on the Seine."),  # ... not doubled
        (SHOWN + " ", FULL, "Paris, on the Seine."),
        ("Paris, a ci", "ty on the Seine.", "ty on the Seine."),  # mid-word
        ("I went to the", "the end.", "the end."),  # a short chance overlap is kept
        ("", "Hello.", "Hello."),
    ],
)
def test_what_follows_the_shown_text_is_shown_once(shown: str, continuation: str, after: str, size: int) -> None:
    assert streamed(shown, continuation, size) == after
    assert Joiner(shown).join(continuation) == after, "the stored text equals the streamed one"


def test_a_continuation_that_only_repeats_shows_nothing() -> None:
    assert streamed(SHOWN, "of France is", 4) == ""


def test_without_prefill_the_shown_text_is_a_finished_turn_and_a_user_turn_asks_to_go_on() -> None:
    base = [{"role": "user", "content": "capital?"}]
    messages = continuation_messages(base, SHOWN + " ", prefill=False)
    assert messages[-2] == {"role": "assistant", "content": [{"type": "text", "text": SHOWN}]}
    assert messages[-1] == {"role": "user", "content": [{"type": "text", "text": CONTINUE_PROMPT}]}
    assert continuation_messages(base, SHOWN, prefill=True)[-1]["role"] == "assistant"
    assert continuation_messages(base, "  ", prefill=False) == base
