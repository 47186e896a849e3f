"""The messages one streamed reply is made of, as its Markdown grows (pure, no I/O).

`ReplyLayout` owns the text side of streaming: the open part grows with each delta; once
its source passes the chunk target it is closed at the best break, its final payload
fixed for good, and a new part opens. At the end the open part gets its final payload,
with status lines gone, so the parts end as exactly `plan_chunks(answer)` (plus a notice,
or the empty-answer text). Delivery state lives on the same `Part` objects but is driven
by `adapters.stream.StreamRenderer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from adapters.render.chunks import ChunkSpec, cut_chunk, final_chunks, render_source
from adapters.render.entities import Payload
from adapters.render.split import normalize_rest
from adapters.render.status import ToolBoard, escape_markdown
from adapters.render.utf16 import index_for_units, measure

PartState = Literal["live", "done", "failed", "gone"]


@dataclass(slots=True)
class Part:
    """One message of a reply: what it must show, and what it shows."""

    index: int
    final: Payload | None = None
    """Fixed once closed or finalized; Payload("") means "this message must not exist"."""
    dirty: bool = True
    """Content changed since the last delivery attempt."""
    message_id: str | None = None
    delivered: Payload | None = None
    state: PartState = "live"
    failures: int = 0
    lost: Payload | None = None
    """Content of a send whose answer was lost: it may show in the chat, under an unknown
    id. Never sent again as is; found (or proved absent) before this part sends."""


class ReplyLayout:
    """Text → parts for one reply on one platform (see the module docstring)."""

    def __init__(self, spec: ChunkSpec, *, empty_text: str, max_status_lines: int) -> None:
        self.spec = spec
        self.board = ToolBoard()
        self.parts = [Part(0)]
        self.source = ""  # everything streamed, for reconciling with the run's final text
        self.finished = False
        self._open = ""  # Markdown of the open (last) part, a reopened fence included
        self._turn_break = False
        self._empty_text = empty_text
        self._max_status = max_status_lines

    @property
    def open_part(self) -> Part:
        return self.parts[-1]

    def turn_ended(self) -> None:
        """Text after the end of a model turn starts a new paragraph."""
        self._turn_break = True

    def append(self, text: str) -> None:
        if not text:
            return
        if self._turn_break and self.source.strip():
            trailing = len(self.source) - len(self.source.rstrip("\n"))
            sep = "\n" * max(0, 2 - trailing)
            self.source += sep
            self._open += sep
        self._turn_break = False
        self.source += text
        self._open += text
        self._relayout()
        self.open_part.dirty = True

    def reconcile(self, final_text: str) -> None:
        """Take text the stream did not carry from the run's final text; never rewrite
        what was streamed (closed parts cannot change)."""
        if final_text and not self.source.strip():
            self.append(final_text)
        elif len(final_text) > len(self.source) and final_text.startswith(self.source):
            self._turn_break = False
            self.append(final_text[len(self.source) :])

    def _relayout(self) -> None:
        spec = self.spec
        while measure(rest := normalize_rest(self._open), spec.unit) > spec.target_units:
            head, self._open = cut_chunk(rest, spec)
            self._fix(self.open_part, head)
            self.parts.append(Part(len(self.parts)))

    def finalize(self, notice: str | None = None) -> None:
        """Fix the final payload of every part; `notice` (an error, "stopped") is appended
        as plain text, in its own message if the last one has no room."""
        self.finished = True
        payloads = final_chunks(self._open, self.spec)
        has_text = bool(payloads) or any(p.final and p.final.text for p in self.parts[:-1])
        if notice:
            note = escape_markdown(notice) if self.spec.renders_markdown else notice
            merged = payloads[-1].with_suffix("\n\n" + note) if payloads else None
            if merged is not None and self.spec.fits(merged):
                payloads[-1] = merged
            else:
                payloads.append(Payload(note))
        elif not has_text:
            payloads.append(Payload(self._empty_text))
        self._fix(self.open_part, payloads[0] if payloads else Payload(""))
        for payload in payloads[1:]:
            part = Part(len(self.parts))
            self.parts.append(part)
            self._fix(part, payload)

    @staticmethod
    def _fix(part: Part, payload: Payload) -> None:
        part.final, part.dirty = payload, True
        if not payload.text and part.message_id is None:
            part.state = "done"

    def payload(self, part: Part) -> Payload:
        """What `part` should show now: its final payload, or for the open part the text so
        far plus tool status lines (older lines dropped first if the limit is near)."""
        if part.final is not None:
            return part.final
        spec = self.spec
        rest = normalize_rest(self._open)
        shown = render_source(rest, spec)
        if not spec.fits(shown):
            text = rest.strip()
            shown = Payload(text[: index_for_units(text, spec.limit_units, spec.unit)])
        lines = self.board.lines(self._max_status, markdown=spec.renders_markdown)
        sep = "\n\n" if shown.text else ""
        while lines:
            candidate = shown.with_suffix(sep + "\n".join(lines))
            if spec.fits(candidate):
                return candidate
            lines = lines[1:]
        return shown
