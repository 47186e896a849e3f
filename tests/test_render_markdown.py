"""Markdown → text + entities, UTF-16 measures, entity validation."""

from __future__ import annotations

import pytest

from adapters.render import Entity, Payload, render_markdown, utf16_len, valid_entities
from adapters.render.utf16 import index_for_units, index_of_utf16, measure, safe_boundary

RICH = (
    "# Title\n\nSome **bold**, _italic_, `code` and a [link](https://example.com) 😀.\n\n"
    "- item one\n- item **two**\n\n> a quote\n\n```python\ndef f(x):\n    return x * 2\n```\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\nEnd ~~strike~~ ||spoiler||."
)


def _in_bounds(p: Payload) -> bool:
    total = utf16_len(p.text)
    return all(e.length > 0 and 0 <= e.offset and e.end <= total for e in p.entities)


def test_inline_formatting_becomes_entities() -> None:
    p = render_markdown("Hello **bold** and `code` and [x](https://e.com)")
    assert p.text == "Hello bold and code and x"
    assert Entity("bold", 6, 4) in p.entities
    assert Entity("code", 15, 4) in p.entities
    assert Entity("text_link", 24, 1, url="https://e.com") in p.entities


def test_entity_offsets_count_emoji_as_two_utf16_units() -> None:
    p = render_markdown("😀 **x**")
    assert p.text == "😀 x"
    assert p.entities == (Entity("bold", 3, 1),)


def test_code_block_language_kept() -> None:
    p = render_markdown("intro\n\n```python\nprint(1)\n```")
    pre = [e for e in p.entities if e.type == "pre"]
    assert pre == [Entity("pre", 7, 8, language="python")]
    assert p.text[7:15] == "print(1)"


def test_unclosed_fence_renders_as_code_without_raising() -> None:
    p = render_markdown("look:\n\n```sh\nls -la\n")
    assert "ls -la" in p.text
    assert any(e.type == "pre" and e.language == "sh" for e in p.entities)


def test_unclosed_bold_shows_literally() -> None:
    assert render_markdown("**half written").text == "**half written"


def test_every_prefix_of_streamed_markdown_renders_with_valid_entities() -> None:
    for i in range(len(RICH) + 1):
        p = render_markdown(RICH[:i])
        assert _in_bounds(p), RICH[:i]
        assert valid_entities(p.text, p.entities) == list(p.entities)


def test_converter_failure_falls_back_to_plain_text() -> None:
    def broken(_: str) -> tuple[str, list[object]]:
        raise RuntimeError("parser bug")

    assert render_markdown("  **x** y  ", convert=broken) == Payload("**x** y")


def test_html_like_text_is_not_dropped() -> None:
    # The converter drops raw HTML; "Vec<T>" or a pasted tag must still show.
    assert render_markdown("Use Vec<T> here").text == "Use Vec<T> here"
    assert render_markdown("<div>\nhello\n</div>").text == "<div>\nhello\n</div>"
    assert render_markdown("`<b>` stays code").entities == (Entity("code", 0, 3),)


def test_markup_only_source_falls_back_to_source_text() -> None:
    assert render_markdown("[ref]: https://example.com").text == "[ref]: https://example.com"


def test_blank_source_renders_empty() -> None:
    assert render_markdown(" \n\n ") == Payload("")


@pytest.mark.parametrize(
    "entity",
    [
        Entity("bold", 0, 0),  # empty
        Entity("bold", 3, 5),  # past the end
        Entity("bold", -1, 2),
        Entity("bold", 1, 1),  # inside the surrogate pair of 😀
        Entity("text_link", 0, 2, url="/relative"),  # Telegram needs an absolute URL
        Entity("custom_emoji", 0, 2),  # needs an id we do not carry
    ],
)
def test_invalid_entities_are_dropped(entity: Entity) -> None:
    assert valid_entities("😀ab", [entity, Entity("italic", 2, 2)]) == [Entity("italic", 2, 2)]


def test_utf16_helpers() -> None:
    assert utf16_len("a😀é") == 4
    assert measure("a😀", "chars") == 2
    assert index_for_units("a😀b", 2) == 1  # the emoji does not fit in 1 remaining unit
    assert index_for_units("a😀b", 3) == 2
    assert index_of_utf16("a😀b", 2) is None
    assert index_of_utf16("a😀b", 3) == 2
    # A string carrying a real surrogate pair (surrogatepass decoding) is never cut inside.
    raw = "a\ud83d\ude00b"
    assert safe_boundary(raw, 2) == 1
    assert index_for_units(raw, 2, "chars") == 1
