"""Length helpers in the units platforms count: UTF-16 code units (Telegram) or characters.

Telegram measures message length and entity offsets in UTF-16 code units, so a character
outside the Basic Multilingual Plane (most emoji) counts 2. Discord counts characters.
A Python `str` indexes code points, so slicing it can never split a surrogate pair unless
the string itself carries lone surrogates (e.g. decoded with "surrogatepass"); the helpers
here step around those too.
"""

from __future__ import annotations

from typing import Literal

Unit = Literal["utf16", "chars"]


def utf16_len(text: str) -> int:
    """Number of UTF-16 code units of `text`."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def measure(text: str, unit: Unit) -> int:
    """Length of `text` in `unit`."""
    return utf16_len(text) if unit == "utf16" else len(text)


def _is_high_surrogate(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def _is_low_surrogate(ch: str) -> bool:
    return "\udc00" <= ch <= "\udfff"


def safe_boundary(text: str, index: int) -> int:
    """`index` moved left if it would separate a lone high/low surrogate pair."""
    if 0 < index < len(text) and _is_high_surrogate(text[index - 1]) and _is_low_surrogate(
        text[index]
    ):
        return index - 1
    return index


def index_for_units(text: str, units: int, unit: Unit = "utf16") -> int:
    """Largest index `i` with `measure(text[:i]) <= units`, never inside a surrogate pair."""
    if units <= 0:
        return 0
    if unit == "chars" or text.isascii():
        return safe_boundary(text, min(units, len(text)))
    used = 0
    for i, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > units:
            return safe_boundary(text, i)
    return len(text)


def utf16_offsets(text: str) -> list[int]:
    """`offsets[i]` = UTF-16 units before `text[i]`; `offsets[len(text)]` = total length."""
    offsets = [0] * (len(text) + 1)
    used = 0
    for i, ch in enumerate(text):
        offsets[i] = used
        used += 2 if ord(ch) > 0xFFFF else 1
    offsets[len(text)] = used
    return offsets


def index_of_utf16(text: str, offset: int) -> int | None:
    """Index `i` with `utf16_len(text[:i]) == offset`, or None if `offset` falls inside a
    character (the second half of a surrogate pair) or outside the text."""
    if offset < 0:
        return None
    if text.isascii():
        return offset if offset <= len(text) else None
    used = 0
    for i, ch in enumerate(text):
        if used == offset:
            return i
        if used > offset:
            return None
        used += 2 if ord(ch) > 0xFFFF else 1
    return len(text) if used == offset else None
