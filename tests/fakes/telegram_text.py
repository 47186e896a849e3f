"""Bot API text rules for the fake: entity checks, trimming, inbound entity detection.

``parse_text`` is the one entry point for outgoing text: explicit entities win over
``parse_mode`` (as in the Bot API) and are validated strictly (known type, UTF-16
offset/length inside the text, not splitting a surrogate pair, required fields such as
``text_link.url``); otherwise the parse mode's parser in ``telegram_markup`` runs.
Errors are :class:`EntityError`, rendered as "Bad Request: can't parse entities: ...".
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.telegram_markup import (
    Entity,
    EntityError,
    parse_html,
    parse_markdown_legacy,
    parse_markdown_v2,
    plausible_url,
    sort_entities,
    utf16_len,
)

__all__ = ["EntityError", "detect_entities", "parse_text", "strip_text", "utf16_len"]

KNOWN_ENTITY_TYPES = frozenset(
    (
        "mention hashtag cashtag bot_command url email phone_number bold italic underline "
        "strikethrough spoiler blockquote expandable_blockquote code pre text_link "
        "text_mention custom_emoji"
    ).split()
)
_ENTITY_KEYS = ("type", "offset", "length", "url", "language", "user", "custom_emoji_id")
# tdlib strips these from both ends of a message text (control chars, spaces, BOM...).
_STRIP = "".join(chr(c) for c in range(33)) + (
    "\u1680\u180e\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u200b\u200c\u200d\u200e\u200f\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def parse_text(text: str, parse_mode: str | None, entities: Any) -> tuple[str, list[Entity]]:
    """Apply explicit ``entities`` (which win over parse_mode, as in the Bot API) or parse_mode."""
    if entities is not None:
        return text, validate_entities(text, entities)
    if not parse_mode:
        return text, []
    mode = parse_mode.lower()
    if mode == "markdownv2":
        return parse_markdown_v2(text)
    if mode == "html":
        return parse_html(text)
    if mode == "markdown":
        return parse_markdown_legacy(text)
    raise ValueError("unsupported parse_mode")


def validate_entities(text: str, entities: Any) -> list[Entity]:
    """Check explicit entities against ``text``; returns them cleaned and sorted."""
    if not isinstance(entities, list):
        raise EntityError("entities must be an Array of MessageEntity")
    size = utf16_len(text)
    boundaries = _utf16_boundaries(text)
    clean: list[Entity] = []
    for k, ent in enumerate(entities):
        if not isinstance(ent, dict):
            raise EntityError(f"entity {k} must be an Object")
        etype, off, length = ent.get("type"), ent.get("offset"), ent.get("length")
        if etype not in KNOWN_ENTITY_TYPES:
            raise EntityError(f"entity {k} has unsupported type {etype!r}")
        if not isinstance(off, int) or not isinstance(length, int) or isinstance(off, bool):
            raise EntityError(f"entity {k} must have integer offset and length")
        if off < 0 or length <= 0 or off + length > size:
            raise EntityError(
                f"entity {k} ({etype}) at offset {off} with length {length} is outside "
                f"the text of {size} UTF-16 code units"
            )
        if off not in boundaries or off + length not in boundaries:
            raise EntityError(f"entity {k} ({etype}) splits a surrogate pair")
        if etype == "text_link" and not (
            isinstance(ent.get("url"), str) and plausible_url(ent["url"])
        ):
            raise EntityError(f"entity {k} (text_link) needs a valid url")
        if etype == "text_mention" and not isinstance(ent.get("user"), dict):
            raise EntityError(f"entity {k} (text_mention) needs a user")
        if etype == "custom_emoji" and not ent.get("custom_emoji_id"):
            raise EntityError(f"entity {k} (custom_emoji) needs a custom_emoji_id")
        if "language" in ent and (etype != "pre" or not isinstance(ent["language"], str)):
            raise EntityError(f"entity {k} ({etype}) can't have a language")
        clean.append(
            {key: ent[key] for key in _ENTITY_KEYS if key in ent and ent[key] not in (None, "")}
        )
    return sort_entities(clean)


def _utf16_boundaries(text: str) -> set[int]:
    pos, marks = 0, {0}
    for ch in text:
        pos += 2 if ord(ch) > 0xFFFF else 1
        marks.add(pos)
    return marks


def strip_text(text: str, entities: list[Entity]) -> tuple[str, list[Entity]]:
    """Trim leading/trailing blanks like Telegram does, shifting and clipping entities."""
    stripped = text.lstrip(_STRIP)
    lead = utf16_len(text) - utf16_len(stripped)
    stripped = stripped.rstrip(_STRIP)
    size = utf16_len(stripped)
    moved: list[Entity] = []
    for ent in entities:
        start = max(ent["offset"] - lead, 0)
        end = min(ent["offset"] + ent["length"] - lead, size)
        if end > start:
            moved.append({**ent, "offset": start, "length": end - start})
    return stripped, sort_entities(moved)


_INBOUND = re.compile(
    r"(?P<bot_command>(?<!\S)/[a-zA-Z0-9_]{1,32}(?:@[a-zA-Z0-9_]{3,32})?)"
    r"|(?P<url>https?://[^\s]+)"
    r"|(?P<mention>(?<![\w@/])@[a-zA-Z0-9_]{4,32})"
)


def detect_entities(text: str) -> list[Entity]:
    """Entities Telegram's clients attach to a typed message: bot commands, mentions, URLs."""
    found: list[Entity] = []
    for m in _INBOUND.finditer(text):
        kind = m.lastgroup or "url"
        start = utf16_len(text[: m.start()])
        found.append({"type": kind, "offset": start, "length": utf16_len(m.group(0))})
    return found
