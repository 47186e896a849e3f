"""Telegram parse modes for the fake Bot API: MarkdownV2, HTML and legacy Markdown.

Contract: each parser returns ``(text, entities)`` as the Bot API would store them (entity
offsets/lengths in UTF-16 code units, sorted, empty ones dropped) or raises
:class:`EntityError` whose message is what follows "can't parse entities: " in the real
400 description. They approximate tdlib: strict where Telegram is strict (unescaped
MarkdownV2 reserved characters, unbalanced markup, unknown or mismatched HTML tags) and
lenient where it is lenient (unknown ``&entities;``, links with implausible URLs dropped).
"""

from __future__ import annotations

import re
from typing import Any

Entity = dict[str, Any]

_MDV2_RESERVED = frozenset("_*[]()~`>#+-=|{}.!")


class EntityError(ValueError):
    """Markup or entities the real Bot API would reject; str() is the detail after
    "Bad Request: can't parse entities: "."""


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (astral characters such as most emoji count 2)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _byte_offset(src: str, index: int) -> int:
    return len(src[:index].encode("utf-8"))


class _Out:
    """Accumulates parsed output text and tracks the current UTF-16 offset."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.pos = 0
        self.entities: list[Entity] = []

    def emit(self, ch: str) -> None:
        self.chars.append(ch)
        self.pos += 2 if ord(ch) > 0xFFFF else 1

    def add(self, etype: str, start: int, **extra: Any) -> None:
        if self.pos > start:
            self.entities.append(
                {"type": etype, "offset": start, "length": self.pos - start, **extra}
            )

    def result(self) -> tuple[str, list[Entity]]:
        return "".join(self.chars), sort_entities(self.entities)


def sort_entities(entities: list[Entity]) -> list[Entity]:
    """Entities in the order Telegram returns them: by offset, outer before inner."""
    return sorted(entities, key=lambda e: (e["offset"], -e["length"], e["type"]))


def plausible_url(url: str) -> bool:
    return bool(re.match(r"^(https?|tg|ton)://\S+$|^[\w.-]+\.[a-z]{2,}(/\S*)?$", url, re.I))


def parse_markdown_v2(src: str) -> tuple[str, list[Entity]]:
    """Parse MarkdownV2 like tdlib: reserved characters must be escaped unless they form markup."""
    out = _Out()
    stack: list[tuple[str, int, int, str]] = []  # (type, utf16 start, source index, language)
    quote_start: int | None = None
    i, n = 0, len(src)

    def reserved(at: int) -> EntityError:
        return EntityError(
            f"Character '{src[at]}' is reserved and must be escaped with the preceding '\\'"
        )

    while i < n:
        c = src[i]
        if c == "\\" and i + 1 < n and 0 < ord(src[i + 1]) <= 126:
            out.emit(src[i + 1])
            i += 2
            continue
        top = stack[-1][0] if stack else None
        if top in ("code", "pre"):
            if top == "code" and c == "`":
                start = stack.pop()[1]
                out.add("code", start)
                i += 1
            elif top == "pre" and src.startswith("```", i):
                _, start, _, lang = stack.pop()
                out.add("pre", start, **({"language": lang} if lang else {}))
                i += 3
            elif c == "`":
                raise reserved(i)
            else:
                out.emit(c)
                i += 1
            continue
        if c == "\n":
            out.emit(c)
            i += 1
            if quote_start is not None and not src.startswith(">", i):
                out.pos -= 1  # the quote ends before the newline
                out.add("blockquote", quote_start)
                out.pos += 1
                quote_start = None
            continue
        if c not in _MDV2_RESERVED:
            out.emit(c)
            i += 1
            continue
        nxt = src[i + 1] if i + 1 < n else ""
        closes = {
            "bold": c == "*",
            "italic": c == "_" and nxt != "_",
            "underline": c == "_" and nxt == "_",
            "strikethrough": c == "~",
            "spoiler": c == "|" and nxt == "|",
            "text_link": c == "]",
            "custom_emoji": c == "]",
        }.get(top or "", False)
        if closes:
            assert top is not None
            _, start, at, _ = stack.pop()
            i += 2 if top in ("underline", "spoiler") else 1
            if top in ("text_link", "custom_emoji"):
                url = ""
                if src.startswith("(", i):
                    j, buf = i + 1, []
                    while j < n and src[j] != ")":
                        if src[j] == "\\" and j + 1 < n:
                            j += 1
                        buf.append(src[j])
                        j += 1
                    if j >= n:
                        raise EntityError(
                            f"Can't find end of a URL at byte offset {_byte_offset(src, i)}"
                        )
                    url, i = "".join(buf), j + 1
                if top == "custom_emoji":
                    m = re.match(r"^tg://emoji\?id=(\d+)$", url)
                    if not m:
                        where = _byte_offset(src, at)
                        raise EntityError(
                            f"Custom emoji entity needs an emoji id at byte offset {where}"
                        )
                    out.add("custom_emoji", start, custom_emoji_id=m.group(1))
                elif plausible_url(url):
                    out.add("text_link", start, url=url)
            else:
                out.add(top, start)
            continue
        at = i
        if c == ">" and (i == 0 or src[i - 1] == "\n"):
            if quote_start is None:
                quote_start = out.pos
            i += 1
            continue
        if c == "_" and nxt == "_":
            stack.append(("underline", out.pos, at, ""))
            i += 2
        elif c == "_":
            stack.append(("italic", out.pos, at, ""))
            i += 1
        elif c == "*":
            stack.append(("bold", out.pos, at, ""))
            i += 1
        elif c == "~":
            stack.append(("strikethrough", out.pos, at, ""))
            i += 1
        elif c == "|" and nxt == "|":
            stack.append(("spoiler", out.pos, at, ""))
            i += 2
        elif c == "[":
            stack.append(("text_link", out.pos, at, ""))
            i += 1
        elif c == "!" and nxt == "[":
            stack.append(("custom_emoji", out.pos, at, ""))
            i += 2
        elif c == "`" and src.startswith("```", i):
            i += 3
            end = i
            while end < n and not src[end].isspace() and src[end] != "`":
                end += 1
            lang = src[i:end] if end > i and end < n and src[end] != "`" else ""
            i = end if lang else i
            if i < n and src[i] in "\r\n":
                i += 2 if (i + 1 < n and src[i + 1] in "\r\n" and src[i + 1] != src[i]) else 1
            stack.append(("pre", out.pos, at, lang))
        elif c == "`":
            stack.append(("code", out.pos, at, ""))
            i += 1
        else:
            raise reserved(i)
    if stack:
        raise EntityError(
            f"Can't find end of the entity starting at byte offset {_byte_offset(src, stack[-1][2])}"
        )
    if quote_start is not None:
        out.add("blockquote", quote_start)
    return out.result()


_HTML_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_NAMED_REFS = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ATTR = re.compile(r"""\s*([a-zA-Z-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>"']+)))?""")


def parse_html(src: str) -> tuple[str, list[Entity]]:
    """Parse Telegram's HTML subset; unknown tags, unmatched or unclosed tags are errors."""
    out = _Out()
    stack: list[tuple[str, int, dict[str, str]]] = []  # (tag, utf16 start, attrs)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "&":
            m = re.match(r"&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);", src[i:])
            ref = m.group(1) if m else ""
            if m and ref.startswith("#"):
                out.emit(chr(int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])))
                i += m.end()
            elif m and ref in _NAMED_REFS:
                out.emit(_NAMED_REFS[ref])
                i += m.end()
            else:
                out.emit(c)
                i += 1
            continue
        if c != "<":
            out.emit(c)
            i += 1
            continue
        at = _byte_offset(src, i)
        close = src.find(">", i)
        if src.startswith("</", i):
            name = src[i + 2 : close].strip().lower() if close != -1 else ""
            if close == -1:
                raise EntityError(f"Unclosed end tag at byte offset {at}")
            if not stack:
                raise EntityError(f"Unexpected end tag at byte offset {at}")
            if name != stack[-1][0]:
                raise EntityError(
                    f'Unmatched end tag at byte offset {at}, expected "</{stack[-1][0]}>", found "</{name}>"'
                )
            tag, start, attrs = stack.pop()
            i = close + 1
            etype = _HTML_TAGS[tag]
            if tag == "a":
                href = attrs.get("href", "")
                if plausible_url(href):
                    out.add("text_link", start, url=href)
            elif (
                tag == "code"
                and stack
                and stack[-1][0] == "pre"
                and attrs.get("class", "").startswith("language-")
            ):
                stack[-1][2]["language"] = attrs["class"].removeprefix("language-")
            elif tag == "pre":
                lang = attrs.get("language")
                out.add("pre", start, **({"language": lang} if lang else {}))
            elif tag == "blockquote" and "expandable" in attrs:
                out.add("expandable_blockquote", start)
            elif tag == "tg-emoji":
                out.add("custom_emoji", start, custom_emoji_id=attrs.get("emoji-id", ""))
            else:
                out.add(etype, start)
            continue
        m = re.match(r"<([a-zA-Z][a-zA-Z0-9-]*)", src[i:])
        name = m.group(1).lower() if m else ""
        if name not in _HTML_TAGS:
            raise EntityError(f'Unsupported start tag "{name}" at byte offset {at}')
        if close == -1:
            raise EntityError(f"Unclosed start tag at byte offset {at}")
        attrs = {
            a.group(1).lower(): next((g for g in a.groups()[1:] if g is not None), "")
            for a in _ATTR.finditer(src[i + 1 + len(name) : close].rstrip("/"))
        }
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise EntityError(f'Tag "span" must have class "tg-spoiler" at byte offset {at}')
        if name == "tg-emoji" and not attrs.get("emoji-id", "").isdigit():
            raise EntityError(f'Tag "tg-emoji" must have attribute "emoji-id" at byte offset {at}')
        stack.append((name, out.pos, attrs))
        i = close + 1
    if stack:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    return out.result()


def parse_markdown_legacy(src: str) -> tuple[str, list[Entity]]:
    """Parse legacy "Markdown": *bold*, _italic_, `code`, ```pre```, [text](url); no nesting."""
    out = _Out()
    i, n = 0, len(src)
    pairs = {"*": "bold", "_": "italic"}
    while i < n:
        c = src[i]
        if c == "\\" and i + 1 < n and src[i + 1] in "_*`[":
            out.emit(src[i + 1])
            i += 2
            continue
        marker = "```" if src.startswith("```", i) else c
        if marker not in ("*", "_", "`", "```", "["):
            out.emit(c)
            i += 1
            continue
        closer = "]" if marker == "[" else marker
        end = src.find(closer, i + len(marker))
        if end == -1:
            raise EntityError(
                f"Can't find end of the entity starting at byte offset {_byte_offset(src, i)}"
            )
        start = out.pos
        for ch in src[i + len(marker) : end]:
            out.emit(ch)
        i = end + len(closer)
        if marker == "[":
            m = re.match(r"\(([^)]*)\)", src[i:])
            if m:
                i += m.end()
                if plausible_url(m.group(1)):
                    out.add("text_link", start, url=m.group(1))
        else:
            out.add(pairs.get(marker, "code" if marker == "`" else "pre"), start)
    return out.result()
