"""Chunk layout: Markdown source → the payloads of consecutive messages for one platform.

The stream renderer and `plan_chunks` use the same three steps, so a streamed reply ends
as exactly `plan_chunks(answer)`: while the rest exceeds the target, cut a chunk at the
best break (`cut_chunk`); render the rest (`final_chunks`), cutting again only if
rendering made it longer than the hard limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.render.entities import Payload
from adapters.render.markdown import render_markdown
from adapters.render.split import close_dangling_fence, next_markdown_cut, normalize_rest
from adapters.render.utf16 import Unit, index_for_units, measure

# Rendering can make text longer than its source (a heading gains an emoji, a rule
# becomes 8 dashes), so platforms we render for keep a margin (OpenClaw: 4000 of 4096).
# Markdown platforms only need room to close a dangling fence while streaming.
RENDER_MARGIN = 96
FENCE_MARGIN = 16


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """How one platform measures and formats a message."""

    limit_units: int
    """Hard limit of one message (Telegram 4096 UTF-16 units, Discord 2000 characters)."""
    unit: Unit
    renders_markdown: bool
    """True: send Markdown source (Discord); False: render to text + entities (Telegram)."""
    target_units: int
    """Source units per chunk before it is cut; leaves room for rendering growth."""

    @classmethod
    def create(
        cls, limit_units: int, unit: Unit, renders_markdown: bool, target_units: int | None = None
    ) -> ChunkSpec:
        if target_units is None:
            margin = FENCE_MARGIN if renders_markdown else RENDER_MARGIN
            target_units = max(limit_units - margin, limit_units // 2)
        if not 0 < target_units <= limit_units:
            raise ValueError(f"target_units must be in (0, {limit_units}], got {target_units}")
        return cls(limit_units, unit, renders_markdown, target_units)

    def fits(self, payload: Payload) -> bool:
        return measure(payload.text, self.unit) <= self.limit_units


def render_source(source: str, spec: ChunkSpec) -> Payload:
    """The payload showing one chunk's Markdown `source` on this platform."""
    if spec.renders_markdown:
        return Payload(close_dangling_fence(source.rstrip()).strip())
    return keep_leading_indent(render_markdown(source))


def keep_leading_indent(payload: Payload) -> Payload:
    """Telegram trims leading spaces of a message, which would unindent a code block that
    opens it. U+00A0 has the same UTF-16 length (entities stay valid) and is not trimmed."""
    text = payload.text
    stripped = text.lstrip(" ")
    if len(stripped) == len(text):
        return payload
    indent = len(text) - len(stripped)
    return Payload("\u00a0" * indent + stripped, payload.entities)


def _hard_plain(source: str, spec: ChunkSpec) -> Payload:
    text = source.strip()
    return Payload(text[: index_for_units(text, spec.limit_units, spec.unit)])


def cut_chunk(rest: str, spec: ChunkSpec, target: int | None = None) -> tuple[Payload, str]:
    """Close the first chunk of `rest` (normalized, longer than `target`): its final
    payload and the rest that continues in the next message. Deterministic in `rest`'s
    first `target + 1` units. If the rendered chunk overflows the limit, the cut moves
    earlier; the last resort is the chunk's source as plain text (it fits by length)."""
    budget = spec.target_units if target is None else target
    for _ in range(4):
        cut = next_markdown_cut(rest, budget, spec.unit)
        if cut is None:  # only when a caller passes a target the rest fits in
            return render_source(rest, spec), ""
        source = cut.chunk(rest)
        payload = render_source(source, spec)
        if spec.fits(payload):
            return payload, cut.remainder(rest)
        excess = measure(payload.text, spec.unit) - spec.limit_units
        budget = max(budget - excess - RENDER_MARGIN, 1)
    return _hard_plain(source, spec), cut.remainder(rest)


def final_chunks(rest: str, spec: ChunkSpec) -> list[Payload]:
    """Payloads for the last part of a reply (`rest` fits the target by source length):
    one payload, or more if rendering pushed it past the hard limit; [] if blank."""
    out: list[Payload] = []
    rest = normalize_rest(rest)
    while rest.strip():
        payload = render_source(rest, spec)
        if spec.fits(payload):
            out.append(payload)
            break
        excess = measure(payload.text, spec.unit) - spec.limit_units
        target = max(measure(rest, spec.unit) - excess - RENDER_MARGIN, 1)
        head, rest = cut_chunk(rest, spec, target)
        if head.text:
            out.append(head)
    return out


def plan_chunks(source: str, spec: ChunkSpec) -> list[Payload]:
    """All payloads of a complete reply, in order. A streamed reply of the same source ends
    as exactly these messages."""
    out: list[Payload] = []
    rest = normalize_rest(source)
    while measure(rest, spec.unit) > spec.target_units:
        head, rest = cut_chunk(rest, spec)
        if head.text:
            out.append(head)
    out.extend(final_chunks(rest, spec))
    return out
