"""Platform-neutral formatting values: `Entity` (a Telegram-style span) and `Payload`.

Offsets and lengths are UTF-16 code units, like Telegram's MessageEntity, so an adapter
converts them field by field without re-measuring. Nothing here imports a platform SDK.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from adapters.render.utf16 import utf16_len, utf16_offsets

# Entity types we can represent and send without extra fields (custom_emoji needs an id,
# text_mention a user): anything else from the converter is dropped.
SUPPORTED_TYPES = frozenset(
    {
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "code",
        "pre",
        "text_link",
        "url",
        "email",
        "blockquote",
        "expandable_blockquote",
    }
)


# Telegram rejects a text_link whose URL has no scheme (relative links, bare emails).
_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True, slots=True)
class Entity:
    """A formatted span of a message, in UTF-16 code units."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    def clipped(self, start: int, end: int) -> Entity | None:
        """The part of this entity inside [start, end), re-based to `start`; None if empty."""
        lo, hi = max(self.offset, start), min(self.end, end)
        if hi <= lo:
            return None
        return Entity(self.type, lo - start, hi - lo, self.url, self.language)


@dataclass(frozen=True, slots=True)
class Payload:
    """What one message shows: text plus entities (empty for platforms that render
    Markdown themselves, or for plain text)."""

    text: str
    entities: tuple[Entity, ...] = ()

    def plain(self) -> Payload:
        """The same text without formatting (the fallback when a platform rejects entities)."""
        return Payload(self.text) if self.entities else self

    def with_suffix(self, suffix: str) -> Payload:
        """Append unformatted text; entities keep their offsets because they precede it."""
        return Payload(self.text + suffix, self.entities)


def valid_entities(text: str, entities: Iterable[Entity]) -> list[Entity]:
    """Entities that are safe to send with `text`: supported type, length > 0, inside the
    text, starting and ending on character boundaries (never mid surrogate pair), links
    with an absolute URL. Invalid ones are dropped, not repaired: a dropped span only loses style."""
    total = utf16_len(text)
    boundaries: set[int] | None = None
    if not text.isascii():
        boundaries = set(utf16_offsets(text))
    kept: list[Entity] = []
    for ent in entities:
        if ent.type not in SUPPORTED_TYPES or ent.length <= 0 or ent.offset < 0:
            continue
        if ent.end > total:
            continue
        if boundaries is not None and (ent.offset not in boundaries or ent.end not in boundaries):
            continue
        if ent.type == "text_link" and not (ent.url and _HAS_SCHEME.match(ent.url)):
            continue
        kept.append(ent)
    return kept


def slice_entities(entities: Iterable[Entity], start: int, end: int) -> tuple[Entity, ...]:
    """Entities overlapping UTF-16 range [start, end), clipped to it and re-based to 0.
    An entity crossing the range edge appears in both neighbouring slices, so a `pre`
    block cut in two is closed at the end of one chunk and reopened in the next."""
    out: list[Entity] = []
    for ent in entities:
        piece = ent.clipped(start, end)
        if piece is not None:
            out.append(piece)
    return tuple(out)
