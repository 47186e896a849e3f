"""Continuing an answer that broke off (a stall, a cut stream, `max_tokens`) without the user
ever reading its first words twice.

Today's models refuse a conversation that ends with a partial assistant answer (prefill), so
the text already shown is sent back as a finished assistant turn followed by a short user
turn asking to go on exactly after it. A model that accepts prefill (per the model table) gets
the classic prefill instead. Either way the continuation may overlap what was shown — some
endpoints ignore prefill and restart the answer, a model asked to continue may repeat the last
words — so `Joiner` drops the longest part of the continuation's start that repeats the end
of the shown text before any of it is shown.
"""

from __future__ import annotations

from typing import Any

CONTINUE_PROMPT = (
    "[Roost: your answer above was cut off. Continue it exactly where it stops: do not repeat "
    "any of it, do not start over, do not mention the interruption.]"
)
MIN_OVERLAP = 4
"""A shorter repeat is only dropped when it is the whole shown text (so "the" continuing
"...in the" is not eaten by chance)."""


def continuation_messages(messages: list[dict[str, Any]], shown: str, *, prefill: bool) -> list[dict[str, Any]]:
    """`messages` plus the shown text as the assistant's turn (trailing whitespace removed, as
    the API requires) and, without prefill, the user turn asking to continue."""
    tail = shown.rstrip()
    if not tail:
        return messages
    answer = {"role": "assistant", "content": [{"type": "text", "text": tail}]}
    if prefill:
        return [*messages, answer]
    return [*messages, answer, {"role": "user", "content": [{"type": "text", "text": CONTINUE_PROMPT}]}]


class Joiner:
    """Feed it the continuation's text as it streams; it returns what may be shown after
    `shown`. While everything received so far also occurs in the shown text it could still be
    a repeat, so it is held back (usually one chunk); once it is not, the repeated overlap is
    cut off and the rest passes through. `finish()` releases whatever is still held."""

    def __init__(self, shown: str) -> None:
        self._shown = shown.rstrip()
        self._spaced = shown != self._shown  # the user already saw a trailing space
        self._held = ""
        self._open = not self._shown

    def feed(self, text: str) -> str:
        if self._open:
            return text
        self._held += text
        probe = self._held.lstrip()
        if probe and probe not in self._shown:
            return self._release()
        return ""

    def finish(self) -> str:
        return "" if self._open else self._release()

    def join(self, text: str) -> str:
        """The whole continuation at once: what `feed`s then `finish` would have returned."""
        return self.feed(text) + self.finish()

    def _release(self) -> str:
        self._open = True
        held, self._held = self._held, ""
        probe = held.lstrip()
        overlap = _overlap(self._shown, probe)
        rest = probe[overlap:] if overlap else held
        return rest.lstrip() if self._spaced else rest


def _overlap(shown: str, text: str) -> int:
    """The length of the longest start of `text` that is also the end of `shown`, beginning at
    a word boundary of `shown` and long enough to be a repeat rather than chance."""
    for k in range(min(len(shown), len(text)), 0, -1):
        if not shown.endswith(text[:k]):
            continue
        whole = k == len(shown)
        at_boundary = whole or not shown[-k - 1].isalnum()
        if at_boundary and (whole or k >= MIN_OVERLAP):
            return k
    return 0
