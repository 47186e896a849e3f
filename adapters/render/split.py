"""Split long replies into chunks that fit one message, at the best break.

Two inputs, one rule set. `split_markdown` cuts Markdown *source* (Discord sends source;
the stream renderer also cuts source for Telegram so a closed chunk never changes) and
never leaves a code fence open: the fence is closed at the end of the chunk and reopened,
with its language, at the start of the next. `split_entities` cuts already rendered
(text, entities); an entity crossing a cut is clipped into both chunks.

Break preference: paragraph (blank line, or just before a code fence) > line > sentence end
> space > hard cut. A break is taken from the last half of the window when one exists there.
Cuts are a pure function of the first `target + 1` units of the remaining text, hence
deterministic and prefix-stable: once text grows past a chunk, that chunk never changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from adapters.render.entities import Entity, Payload, slice_entities
from adapters.render.utf16 import Unit, index_for_units, measure, utf16_offsets

PARA, LINE, SENTENCE, SPACE = range(4)

_OPEN_RE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_CLOSE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t\r]*$")
_SENTENCE_RE = re.compile(r"[.!?][\"'”’)\]]*(?=[ \t])|[。！？]")
_SPACES_RE = re.compile(r"[ \t]+")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


@dataclass(frozen=True, slots=True)
class Fence:
    """An open code fence: how to close it and how to reopen it in the next chunk."""

    indent: str
    marker: str
    info: str

    @property
    def opener(self) -> str:
        return f"{self.indent}{self.marker}{self.info}"

    @property
    def closer(self) -> str:
        return f"{self.indent}{self.marker}"

    def closes_with(self, line: str) -> bool:
        m = _CLOSE_RE.match(line)
        return bool(m) and m.group(1)[0] == self.marker[0] and len(m.group(1)) >= len(self.marker)


def _opens(line: str) -> Fence | None:
    m = _OPEN_RE.match(line)
    if m is None:
        return None
    indent, marker, info = m.groups()
    if marker[0] == "`" and "`" in info:  # CommonMark: a backtick fence's info has none
        return None
    return Fence(indent, marker, info.strip())


@dataclass(frozen=True, slots=True)
class Line:
    """One line of Markdown source and the code fence open before and after it."""

    start: int
    end: int  # index of the terminating "\n", or len(text) for the last line
    before: Fence | None
    after: Fence | None


def scan_lines(text: str) -> list[Line]:
    """Every line of `text` (at least one) with its fence state. Fences follow CommonMark
    (``` or ~~~, closed by the same character at least as long) but any indentation is
    accepted, because models indent fences inside list items."""
    lines: list[Line] = []
    fence: Fence | None = None
    start = 0
    while start <= len(text):
        nl = text.find("\n", start)
        end = len(text) if nl < 0 else nl
        line = text[start:end]
        before = fence
        if fence is None:
            fence = _opens(line)
        elif fence.closes_with(line):
            fence = None
        lines.append(Line(start, end, before, fence))
        if nl < 0:
            break
        start = nl + 1
    return lines


def open_fence(text: str) -> Fence | None:
    """The fence still open at the end of Markdown `text`, if any."""
    lines = scan_lines(text)
    return lines[-1].after if lines else None


def close_dangling_fence(text: str) -> str:
    """`text` with an unclosed code fence closed (for showing half-written Markdown)."""
    fence = open_fence(text)
    return f"{text}\n{fence.closer}" if fence else text


def normalize_rest(text: str) -> str:
    """Drop leading blank lines: what a chunk starts with after a paragraph break."""
    return _LEADING_BLANK_LINES.sub("", text, count=1)


@dataclass(frozen=True, slots=True)
class Cut:
    """Where to end a chunk (`end`), where the next one resumes (`resume`), and the code
    fence open at the cut (closed in this chunk, reopened in the next)."""

    end: int
    resume: int
    fence: Fence | None = None

    def chunk(self, rest: str) -> str:
        body = rest[: self.end]
        return f"{body}\n{self.fence.closer}" if self.fence else body.rstrip()

    def remainder(self, rest: str) -> str:
        tail = rest[self.resume :]
        return f"{self.fence.opener}\n{tail}" if self.fence else normalize_rest(tail)


def _pick(cands: list[list[tuple[int, int]]], min_fill: int, ok) -> tuple[int, int] | None:
    """The last candidate of the best class reaching `min_fill`, else of the best class."""
    for floor in (min_fill, 0):
        for cls in cands:
            for end, resume in sorted(cls, reverse=True):
                if end >= floor and ok(end):
                    return end, resume
    return None


def next_markdown_cut(rest: str, target: int, unit: Unit = "chars") -> Cut | None:
    """The first cut of Markdown `rest` into a chunk of at most `target` units (fence closer
    included), or None when `rest` fits. Only reads `rest[:index_for_units(target) + 1]`."""
    if measure(rest, unit) <= target:
        return None
    hi = index_for_units(rest, target, unit)
    window = rest[: hi + 1]
    lines = scan_lines(window)
    # A chunk that starts by reopening a fence must carry more than the reopening line.
    floor = lines[0].end if lines[0].before is None and lines[0].after is not None else 0
    fence_hi: dict[Fence, int] = {}

    def limit_in(fence: Fence | None) -> int:
        if fence is None:
            return hi
        if fence not in fence_hi:
            fence_hi[fence] = index_for_units(rest, target - measure("\n" + fence.closer, unit), unit)
        return fence_hi[fence]

    cands: list[list[tuple[int, int]]] = [[], [], [], []]
    fence_at: dict[int, Fence | None] = {}
    for k, ln in enumerate(lines):
        if ln.end < len(window) and ln.end <= limit_in(ln.after):
            is_opener = ln.before is None and ln.after is not None
            if ln.after is not None:
                if not is_opener:
                    cands[LINE].append((ln.end, ln.end + 1))
                    fence_at[ln.end] = ln.after
            else:
                nxt = lines[k + 1] if k + 1 < len(lines) else None
                blank_next = nxt is not None and not window[nxt.start : nxt.end].strip()
                opener_next = nxt is not None and _opens(window[nxt.start : nxt.end]) is not None
                has_text = bool(window[ln.start : ln.end].strip())
                cls = PARA if (blank_next and has_text) or opener_next else LINE
                cands[cls].append((ln.end, ln.end + 1))
        if ln.before is None and ln.after is None:  # prose line: sentence and space breaks
            text = window[ln.start : ln.end]
            for m in _SENTENCE_RE.finditer(text):
                end = ln.start + m.end()
                resume = end
                while resume < len(window) and window[resume] in " \t":
                    resume += 1
                if end <= hi:
                    cands[SENTENCE].append((end, resume))
            for m in _SPACES_RE.finditer(text):
                if m.start() > 0 and ln.start + m.start() <= hi:
                    cands[SPACE].append((ln.start + m.start(), ln.start + m.end()))

    def ok(end: int) -> bool:
        return end > floor and bool(rest[floor:end].strip())

    min_fill = index_for_units(rest, target // 2, unit)
    picked = _pick(cands, min_fill, ok)
    if picked is not None:
        end, resume = picked
        return Cut(end, resume, fence_at.get(end))
    # Hard cut: inside a fence body it still closes and reopens the fence.
    line = next((ln for ln in lines if ln.start <= hi <= ln.end), lines[-1])
    fence = line.before if line.before is not None and line.after is not None else None
    end = max(limit_in(fence), floor + 1) if fence else max(hi, 1)
    return Cut(end, end, fence)


def split_markdown(source: str, target: int, unit: Unit = "chars") -> list[str]:
    """Markdown `source` as chunks of at most `target` units each, fences kept balanced."""
    rest = normalize_rest(source)
    chunks: list[str] = []
    while (cut := next_markdown_cut(rest, target, unit)) is not None:
        chunks.append(cut.chunk(rest))
        rest = cut.remainder(rest)
    if rest.strip():
        chunks.append(rest.rstrip())
    return chunks


def _code_mask(text: str, entities: Iterable[Entity], offsets: list[int]) -> list[bool]:
    """Per character of `text`: inside a code or pre entity (no sentence/space breaks)."""
    mask = [False] * len(text)
    index = {u: i for i, u in enumerate(offsets)}
    for ent in entities:
        if ent.type in ("code", "pre"):
            lo, hi = index.get(ent.offset), index.get(ent.end)
            if lo is not None and hi is not None:
                for i in range(lo, hi):
                    mask[i] = True
    return mask


def _rendered_cut(text: str, start: int, hi: int, target_fill: int, mask: list[bool]) -> tuple[int, int]:
    window = text[start : hi + 1]
    cands: list[list[tuple[int, int]]] = [[], [], [], []]
    for m in re.finditer(r"\n[ \t]*\n\s*|\n", window):
        cls = PARA if m.group().count("\n") > 1 else LINE
        end = start + m.start()
        if end <= hi:
            cands[cls].append((end, start + m.end()))
    for m in _SENTENCE_RE.finditer(window):
        end = start + m.end()
        if end <= hi and not mask[end - 1]:
            cands[SENTENCE].append((end, end))
    for m in _SPACES_RE.finditer(window):
        end = start + m.start()
        if end <= hi and not mask[end]:
            cands[SPACE].append((end, start + m.end()))

    def ok(end: int) -> bool:
        return end > start and bool(text[start:end].strip())

    picked = _pick(cands, target_fill, ok)
    return picked if picked is not None else (max(hi, start + 1), max(hi, start + 1))


def split_entities(
    text: str, entities: Iterable[Entity], target: int, unit: Unit = "utf16"
) -> list[Payload]:
    """Rendered `text` + `entities` as payloads of at most `target` units each.

    Chunks carry no leading/trailing whitespace (Telegram would trim it and shift every
    entity); entities are clipped into each chunk and re-based to its start."""
    ents = tuple(entities)
    offsets = utf16_offsets(text)
    mask = _code_mask(text, ents, offsets)

    def payload(lo: int, hi: int) -> Payload:
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
        return Payload(text[lo:hi], slice_entities(ents, offsets[lo], offsets[hi]))

    out: list[Payload] = []
    start = 0
    while True:
        while start < len(text) and text[start].isspace():
            start += 1
        rest = text[start:]
        if not rest:
            return out
        if measure(rest, unit) <= target:
            out.append(payload(start, len(text)))
            return out
        hi = start + index_for_units(rest, target, unit)
        fill = start + index_for_units(rest, target // 2, unit)
        end, resume = _rendered_cut(text, start, hi, fill, mask)
        out.append(payload(start, end))
        start = resume
