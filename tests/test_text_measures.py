"""What every run computes over its whole transcript — "is it clean?" and "how big is it?" —
gives the same answers on its fast paths as the plain definitions (agent_core.text,
agent_core.transcript): a wrong "clean" would let a NUL or half an emoji wedge the session,
a wrong size would send or drop the wrong turns."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agent_core.text import is_clean, json_text
from agent_core.transcript import IMAGE_CHARS, PDF_CHARS_RATIO, size_of, window

EMOJI = "\U0001f600"


@pytest.mark.parametrize(
    "value,clean",
    [
        ([{"type": "text", "text": f"fine {EMOJI} é \n \\u0000 \\ud83d"}], True),  # escapes as text are text
        ([{"type": "text", "text": "a NUL \x00 here"}], False),
        ([{"type": "text", "text": "half an emoji \ud83d"}], False),
        ([{"type": "text", "text": "the other half \ude00"}], False),
        ({"bad key \x00": "fine"}, False),
        ({"fine": [[{"deep": ["x", "\udfff"]}]]}, False),
        ([{"type": "tool_use", "input": {"n": 1.5, "nan": math.nan, "k": None, "b": True}}], True),
        ({1: "int keys are fine", None: "so is None"}, True),
        ([("tuples are not looked into", "\x00")], True),
        ([b"bytes are not text", object()], True),
        ([object(), "what JSON cannot write is walked: \x00"], False),
        ([], True),
        ({}, True),
        ("\x00", False),
        (f"{EMOJI}", True),
    ],
)
def test_is_clean_finds_each_nul_and_lone_surrogate_and_nothing_else(value: Any, clean: bool) -> None:
    assert is_clean(value) is clean


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        f"q\"uote\\ \n\t\x01 é {EMOJI} \ud83d",
        [],
        {},
        [{"type": "text", "text": "hi é\n"}],
        [{"type": "tool_use", "id": "x", "input": {"a": 1.5, "b": [1, None, True, math.nan, -math.inf], 3: {"z": 1}}}],
        {"nested": [[[{"deep": "x" * 10_000}]]]},
        3,
        None,
    ],
)
def test_json_text_is_what_json_dumps_writes(value: Any) -> None:
    assert json_text(value) == json.dumps(value, ensure_ascii=False)


def test_json_text_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        json_text([{"x": object()}])
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="Circular reference"):
        json_text(cyclic)
    # and the next call is not confused by the failed one
    assert json_text([[1], [1]]) == "[[1], [1]]"


def test_media_counts_its_token_cost_and_text_about_base64_counts_as_text() -> None:
    data = "A" * 100_000
    image = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}
    pdf = {"role": "user", "content": [{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}]}
    talk = {"role": "user", "content": [{"type": "text", "text": 'the "base64" source type, explained'}]}
    assert size_of([image]) == len(json.dumps(image["content"], ensure_ascii=False)) - len(data) + IMAGE_CHARS
    assert size_of([pdf]) == len(json.dumps(pdf["content"], ensure_ascii=False)) - len(data) + len(data) // PDF_CHARS_RATIO
    assert size_of([talk]) == len(json.dumps(talk["content"], ensure_ascii=False))
    # A photo does not push the conversation out of the window: it counts its tokens' worth.
    history = [talk, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}, image]
    assert window(history, 8_000) == history
