"""Text that is safe to store and to send, whatever produced it.

Every way text enters Roost — platform updates, the model's stream, tool output, files read —
passes through `clean_text` (or `clean_json` for structures), so that:

- a lone UTF-16 surrogate (half an emoji, e.g. from a split `\\ud83d`) never reaches storage
  or a request, where it raises `UnicodeEncodeError` on every later request of the session;
- a NUL character never reaches storage, where PostgreSQL rejects it (text and JSON alike).

Both are replaced by visible stand-ins rather than dropped, so nothing vanishes silently.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

REPLACEMENT = "\ufffd"
"""Stands in for a lone surrogate (the Unicode replacement character)."""
NUL_STAND_IN = "\u2400"
"""Stands in for a NUL character (SYMBOL FOR NULL, ␀)."""

_BAD = re.compile("[\ud800-\udfff\x00]")

T = TypeVar("T")


def _replace(match: re.Match[str]) -> str:
    return NUL_STAND_IN if match.group() == "\x00" else REPLACEMENT


def clean_text(text: str) -> str:
    """`text` with lone surrogates → U+FFFD and NUL → U+2400; unchanged (same object) when
    it has neither, so the common case costs one regex scan."""
    if _BAD.search(text) is None:
        return text
    return _BAD.sub(_replace, text)


def clean_json(value: T) -> T:
    """`clean_text` applied to every string (keys included) of a JSON-like structure."""
    if isinstance(value, str):
        return clean_text(value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [clean_json(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean_json(v) for k, v in value.items()}  # type: ignore[return-value]
    return value


def is_clean(value: Any) -> bool:
    """True when no string in `value` holds a lone surrogate or a NUL."""
    if isinstance(value, str):
        return _BAD.search(value) is None
    if isinstance(value, list):
        return all(is_clean(v) for v in value)
    if isinstance(value, dict):
        return all(is_clean(k) and is_clean(v) for k, v in value.items())
    return True
