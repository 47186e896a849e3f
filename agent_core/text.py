"""Text that is safe to store and to send, whatever produced it.

Every way text enters Roost — platform updates, the model's stream, tool output, files read —
passes through `clean_text` (or `clean_json` for structures), so that:

- a lone UTF-16 surrogate (half an emoji, e.g. from a split `\\ud83d`) never reaches storage
  or a request, where it raises `UnicodeEncodeError` on every later request of the session;
- a NUL character never reaches storage, where PostgreSQL rejects it (text and JSON alike).

Both are replaced by visible stand-ins rather than dropped, so nothing vanishes silently.
"""

from __future__ import annotations

import json
import re
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
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
    if isinstance(value, (list, dict)):
        # A whole transcript is checked on every run: one scan of its JSON (in C) says
        # "clean" for the usual case; anything it cannot vouch for is walked as before.
        # The JSON keeps lone surrogates as they are and writes a NUL as \u0000.
        try:
            text = json_text(value)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            if _BAD.search(text) is None and "\\u0000" not in text:
                return True
    return _is_clean(value)


def _is_clean(value: Any) -> bool:
    if isinstance(value, str):
        return _BAD.search(value) is None
    if isinstance(value, list):
        return all(_is_clean(v) for v in value)
    if isinstance(value, dict):
        return all(_is_clean(k) and _is_clean(v) for k, v in value.items())
    return True


_ENCODER = json.JSONEncoder(ensure_ascii=False)


def json_text(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)`. Transcripts are measured and checked several
    times per run, and for a small block dumps spent more on setting up its encoder than on
    encoding; the C encoder made directly (with fresh cycle markers, as dumps) is the same."""
    if c_make_encoder is None or isinstance(value, str):
        return _ENCODER.encode(value)
    encode = c_make_encoder({}, _ENCODER.default, encode_basestring, None, ": ", ", ", False, False, True)
    return "".join(encode(value, 0))
