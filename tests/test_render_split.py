"""Splitting long replies: limits, break preference, fences, entities, determinism."""

from __future__ import annotations

import random

import pytest

from adapters.render import (
    ChunkSpec,
    Entity,
    Payload,
    open_fence,
    plan_chunks,
    split_entities,
    split_markdown,
    utf16_len,
    valid_entities,
)

TELEGRAM = ChunkSpec.create(4096, "utf16", renders_markdown=False)
DISCORD = ChunkSpec.create(2000, "chars", renders_markdown=True)

WORDS = ["alpha", "beta", "gamma", "δέλτα", "😀", "👍🏽", "end.", "yes!", "why?", "中文。", "x"]


def random_markdown(rng: random.Random, size: int) -> str:
    """Prose paragraphs, lists and fenced code with emoji, roughly `size` chars long."""
    parts: list[str] = []
    while sum(map(len, parts)) < size:
        kind = rng.random()
        if kind < 0.2:
            lang = rng.choice(["python", "", "sh"])
            body = "\n".join(
                "    " * rng.randint(0, 2) + " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
                for _ in range(rng.randint(1, 60))
            )
            parts.append(f"```{lang}\n{body}\n```")
        elif kind < 0.3:
            parts.append("\n".join(f"- {' '.join(rng.choices(WORDS, k=6))}" for _ in range(5)))
        elif kind < 0.35:
            parts.append("😀" * rng.randint(50, 900))  # no break at all: hard cuts
        else:
            parts.append(" ".join(rng.choices(WORDS, k=rng.randint(5, 120))))
    return "\n\n".join(parts)


def _content(text: str) -> str:
    """Non-whitespace text without fence lines (which splitting may add)."""
    lines = (ln for ln in text.split("\n") if not ln.strip().startswith("```"))
    return "".join("".join(lines).split())


def test_short_text_is_one_chunk() -> None:
    assert split_markdown("hello\n\nworld", 100) == ["hello\n\nworld"]


def test_paragraph_break_preferred_over_line_and_space() -> None:
    text = "a" * 60 + "\n\n" + "b" * 20 + "\n" + "c c c c"
    assert split_markdown(text, 80) == ["a" * 60, "b" * 20 + "\n" + "c c c c"]


def test_sentence_end_preferred_over_space() -> None:
    text = "one two three four five. six seven eight nine ten"
    assert split_markdown(text, 30) == ["one two three four five.", "six seven eight nine ten"]


def test_break_in_first_half_is_avoided_when_a_later_one_exists() -> None:
    text = "a\n\n" + "word " * 30
    chunks = split_markdown(text, 100)
    assert len(chunks[0]) > 50


def test_fence_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"line {i}" for i in range(40))
    text = f"intro\n\n```python\n{code}\n```\n\nafter"
    chunks = split_markdown(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert open_fence(chunk) is None, chunk  # every chunk's fences are balanced
    assert chunks[1].startswith("```python\n") or chunks[0].endswith("```")
    for later in chunks[2:-1]:
        assert later.startswith("```python\n") and later.endswith("\n```")
    rejoined = "".join(c.removeprefix("```python\n").removesuffix("\n```") for c in chunks)
    assert all(f"line {i}" in rejoined for i in range(40))


def test_cut_before_a_code_block_keeps_it_whole() -> None:
    text = "p" * 70 + "\n```sh\n" + "echo hi\n" * 5 + "```\n" + "q " * 40
    chunks = split_markdown(text, 110)
    assert chunks[0] == "p" * 70
    assert chunks[1].startswith("```sh\n") and chunks[1].count("```") == 2


def test_hard_cut_never_splits_a_surrogate_pair() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units, no break anywhere
    chunks = split_markdown(text, 4001, unit="utf16")
    assert [utf16_len(c) for c in chunks] == [4000, 2000]
    assert "".join(chunks) == text


@pytest.mark.parametrize("seed", range(12))
def test_chunks_fit_limit_and_lose_no_text(seed: int) -> None:
    rng = random.Random(seed)
    text = random_markdown(rng, rng.randint(5000, 15000))
    for spec in (TELEGRAM, DISCORD):
        chunks = split_markdown(text, spec.target_units, spec.unit)
        for chunk in chunks:
            assert spec.fits(Payload(chunk)) and open_fence(chunk) is None
        assert _content("\n".join(chunks)) == _content(text)
        for payload in plan_chunks(text, spec):
            assert spec.fits(payload) and payload.text.strip()
            assert valid_entities(payload.text, payload.entities) == list(payload.entities)


@pytest.mark.parametrize("seed", range(6))
def test_split_is_deterministic_and_prefix_stable(seed: int) -> None:
    # Streaming depends on this: a chunk, once text has grown past it, never changes.
    rng = random.Random(100 + seed)
    text = random_markdown(rng, 9000)
    full = split_markdown(text, 1000, "utf16")
    assert split_markdown(text, 1000, "utf16") == full
    for end in range(0, len(text), 97):
        part = split_markdown(text[:end], 1000, "utf16")
        closed = part[:-1]
        assert full[: len(closed)] == closed, end


def test_plan_of_10k_answer_with_code_across_4096_splits_pre_entity() -> None:
    prose = ("This is prose that explains things. " * 60).strip()  # ~2.2k chars
    code = "\n".join(f"    result_{i} = compute(value_{i}) + 😀" for i in range(220))
    answer = f"{prose}\n\n```python\n{code}\n```\n\n{prose}\n\n{prose}"
    assert len(answer) > 10_000
    chunks = plan_chunks(answer, TELEGRAM)
    assert len(chunks) >= 3
    assert all(utf16_len(c.text) <= 4096 for c in chunks)
    # The code block crosses a cut: closed at the end of one message, reopened at the
    # start of the next, language kept.
    crossings = [
        (a, b)
        for a, b in zip(chunks, chunks[1:])
        if any(e.type == "pre" and e.end == utf16_len(a.text) for e in a.entities)
        and any(e.type == "pre" and e.offset == 0 and e.language == "python" for e in b.entities)
    ]
    assert crossings


def test_split_entities_clips_entity_into_both_chunks() -> None:
    text = "intro line\n" + "code line\n" * 30 + "outro"
    pre_start = len("intro line\n")
    ents = [Entity("pre", pre_start, 300, language="py"), Entity("bold", 0, 5)]
    chunks = split_entities(text, ents, 100)
    assert len(chunks) > 2
    for chunk in chunks:
        assert utf16_len(chunk.text) <= 100
        assert chunk.text == chunk.text.strip()
        assert valid_entities(chunk.text, chunk.entities) == list(chunk.entities)
    assert Entity("bold", 0, 5) in chunks[0].entities
    assert all(any(e.type == "pre" and e.language == "py" for e in c.entities) for c in chunks[:-1])
    assert Entity("pre", 0, utf16_len(chunks[1].text), language="py") in chunks[1].entities


def test_split_entities_counts_utf16_and_keeps_pairs() -> None:
    text = "😀" * 150
    chunks = split_entities(text, [Entity("bold", 0, 300)], 101)
    assert [utf16_len(c.text) for c in chunks] == [100, 100, 100]
    assert all(c.entities == (Entity("bold", 0, 100),) for c in chunks)


def test_split_entities_does_not_break_inside_code_at_spaces() -> None:
    text = "word " * 10 + "\n" + "x = 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8"
    code_at = text.index("x =")
    chunks = split_entities(text, [Entity("code", code_at, len(text) - code_at)], 60)
    assert chunks[0].text == ("word " * 10).strip()
