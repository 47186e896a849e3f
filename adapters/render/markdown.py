"""Markdown → (plain text, entities) for platforms without native Markdown (Telegram).

Built on telegramify-markdown's `convert`, whose entities are already in UTF-16 units; we
copy them into our own `Entity` so nothing downstream depends on the library or on
telegram. Sending entities instead of a parse mode means formatting cannot make a message
fail to parse.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import telegramify_markdown
from telegramify_markdown.config import RenderConfig

from adapters.render.entities import Entity, Payload, valid_entities
from adapters.render.split import scan_lines

__all__ = ["Entity", "Payload", "plain_payload", "render_markdown"]

log = logging.getLogger(__name__)

# An isolated config: other code mutating the library's global symbols cannot change ours.
_CONFIG = RenderConfig.isolated()

# The converter drops raw HTML (CommonMark HTML blocks and inline tags), which silently
# loses text such as "Vec<T>" or a pasted "<div>". We escape "<" that would start a tag,
# outside code, so it shows literally; autolinks (<https://…>, <a@b.c>) keep working.
_TAG_START = re.compile(r"(?<!\\)<(?=[A-Za-z/!?])")
_AUTOLINK = re.compile(r"<(?:[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*|[^\s<>@]+@[^\s<>]+)>")
_TICKS = re.compile(r"`+")


def _inline_code_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    while (m := _TICKS.search(text, pos)) is not None:
        closer = re.compile(rf"(?<!`)`{{{len(m.group())}}}(?!`)").search(text, m.end())
        if closer is None:
            pos = m.end()
            continue
        spans.append((m.start(), closer.end()))
        pos = closer.end()
    return spans


def _escape_prose(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        return "<" if _AUTOLINK.match(text, m.start()) else "\\<"

    out: list[str] = []
    pos = 0
    for lo, hi in _inline_code_spans(text):
        out.append(_TAG_START.sub(repl, text[pos:lo]))
        out.append(text[lo:hi])
        pos = hi
    out.append(_TAG_START.sub(repl, text[pos:]))
    return "".join(out)


def escape_html(source: str) -> str:
    """`source` with tag-like "<" escaped outside fenced and inline code."""
    if "<" not in source:
        return source
    out: list[str] = []
    prose: list[str] = []
    for ln in scan_lines(source):
        line = source[ln.start : ln.end + 1]  # keep the newline
        if ln.before is None and ln.after is None:
            prose.append(line)
            continue
        out.append(_escape_prose("".join(prose)))
        prose.clear()
        out.append(line)
    out.append(_escape_prose("".join(prose)))
    return "".join(out)


def plain_payload(source: str) -> Payload:
    """The fallback rendering: the source as plain text, no entities."""
    return Payload(source.strip())


Converter = Callable[[str], tuple[str, list[Any]]]


def _convert(source: str) -> tuple[str, list[Any]]:
    return telegramify_markdown.convert(source, config=_CONFIG)


def render_markdown(source: str, convert: Converter = _convert) -> Payload:
    """Render Markdown to text + entities. Never raises, including on half-written
    Markdown from a stream (unclosed fences or emphasis): on any converter failure the
    source comes back as plain text. Entities are validated (supported type, in bounds,
    length > 0, on character boundaries); invalid ones are dropped. `convert` is the
    library call, replaceable for tests."""
    if not source.strip():
        return Payload("")
    try:
        text, raw = convert(escape_html(source))
        entities = [
            Entity(e.type, e.offset, e.length, e.url, e.language)
            for e in raw
            if isinstance(e.offset, int) and isinstance(e.length, int)
        ]
    except Exception:  # the converter is third-party code fed half-written input
        log.warning("render.markdown_failed", exc_info=True)
        return plain_payload(source)
    if not text.strip():
        # Everything was markup the converter swallowed (HTML, link definitions): show
        # the source rather than nothing.
        return plain_payload(source)
    return Payload(text, tuple(valid_entities(text, entities)))
