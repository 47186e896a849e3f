"""HTML → readable text for web_fetch: headings as '#', paragraphs and list items on their
own lines, links as [text](absolute url); scripts, styles, navigation and forms dropped.

A streaming converter on the standard library's `html.parser`: no document tree is built.
A tree of a big page is hundreds of thousands of linked objects; the garbage collector's
full passes over them stopped every thread (the event loop too) for ~0.2 s at a time,
wherever the parse ran. Streaming keeps only short-lived objects and the output strings.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin

DROP = frozenset(
    {"script", "style", "nav", "noscript", "template", "svg", "iframe", "object", "embed",
     "form", "button", "select", "head", "canvas"}
)
BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "aside", "ul", "ol", "dl",
     "dt", "dd", "table", "thead", "tbody", "tr", "blockquote", "figure", "figcaption",
     "address", "details", "summary", "hr", "body", "html"}
)
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
     "source", "track", "wbr"}
)
HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n{3,}")
_PRE_MARK = re.compile(r"\x00PRE(\d+)\x00")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)


def html_to_text(html: bytes | str, base_url: str, encoding: str | None = None) -> tuple[str, str]:
    """(title, text) of an HTML document."""
    source = html if isinstance(html, str) else _decode(html, encoding)
    parser = _Converter(base_url)
    parser.feed(source)
    parser.close()
    text = "".join(parser.out)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    text = _BLANKS.sub("\n\n", "\n".join(lines)).strip()
    # Preformatted blocks were kept aside so whitespace clean-up leaves them intact.
    return parser.title, _PRE_MARK.sub(lambda m: _pick(parser.pre, int(m.group(1))), text)


def _decode(raw: bytes, encoding: str | None) -> str:
    """The HTTP charset, else the page's <meta charset>, else UTF-8, else Windows-1252."""
    declared = _META_CHARSET.search(raw[:4096])
    for name in (encoding, declared.group(1).decode("ascii") if declared else None):
        if name:
            try:
                codecs.lookup(name)
            except LookupError:
                continue
            return raw.decode(name, "replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")


def _pick(blocks: list[str], index: int) -> str:
    return blocks[index] if index < len(blocks) else ""


@dataclass
class _Capture:
    """An element whose output is its plain text: a heading, a link, a <pre>."""

    tag: str
    depth: int
    """Length of the open-element stack when it started."""
    href: str | None = None
    parts: list[str] = field(default_factory=list)


class _Converter(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base_url
        self.out: list[str] = []
        self.pre: list[str] = []
        self.title = ""
        self._stack: list[str] = []
        self._dropping = 0
        """Open elements of DROP: nothing inside them is output."""
        self._captures: list[_Capture] = []
        self._title_parts: list[str] | None = None
        self._title_done = False

    # -- structure ----------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self._title_done:
            self._title_parts = []
        if tag in VOID:
            self._void(tag, attrs)
            return
        self._stack.append(tag)
        if tag in DROP:
            self._dropping += 1
        if self._dropping:
            return
        if self._captures:  # inside a heading, link or pre: text only
            if tag == "pre" or tag in HEADINGS or tag == "a":
                self._captures.append(_Capture(tag, len(self._stack)))  # flattened later
            return
        if tag in HEADINGS or tag == "pre":
            self._captures.append(_Capture(tag, len(self._stack)))
        elif tag == "a":
            self._captures.append(_Capture(tag, len(self._stack), href=dict(attrs).get("href")))
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag in BLOCKS:
            self.out.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            self._void(tag, attrs)
            return
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title_parts is not None:
            self.title = " ".join("".join(self._title_parts).split())
            self._title_parts, self._title_done = None, True
        if tag not in self._stack:
            return  # a stray end tag
        while self._stack:
            if self._close(self._stack.pop()) == tag:
                break

    def _close(self, tag: str) -> str:
        if self._dropping:
            if tag in DROP:
                self._dropping -= 1
            return tag
        if self._captures and self._captures[-1].depth == len(self._stack) + 1:
            self._finish(self._captures.pop())
        elif not self._captures and tag in BLOCKS:
            self.out.append("\n\n")
        return tag

    def _void(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropping or self._captures:
            return
        if tag == "br":
            self.out.append("\n")
        elif tag == "hr":
            self.out.append("\n\n\n\n")
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self.out.append(f"[image: {alt}]")

    def _finish(self, capture: _Capture) -> None:
        if self._captures:  # nested: the outer capture takes its text
            self._captures[-1].parts.extend(capture.parts)
            return
        if capture.tag == "pre":
            body = "".join(capture.parts).strip("\n")
            self.pre.append(f"```\n{body}\n```")
            self.out.append(f"\n\n\x00PRE{len(self.pre) - 1}\x00\n\n")
            return
        text = " ".join(" ".join(capture.parts).split())
        if not text:
            return
        if capture.tag in HEADINGS:
            self.out.append(f"\n\n{'#' * int(capture.tag[1])} {text}\n\n")
            return
        href = capture.href
        if not href or href.startswith(("#", "javascript:", "mailto:")):
            self.out.append(text)
        else:
            self.out.append(f"[{text}]({urljoin(self.base, href.strip())})")

    # -- text ---------------------------------------------------------------------------

    def handle_data(self, data: str) -> None:
        if self._title_parts is not None:
            self._title_parts.append(data)
        if self._dropping:
            return
        if self._captures:
            self._captures[-1].parts.append(data)
            return
        self.out.append(_SPACES.sub(" ", data.replace("\n", " ").replace("\x00", "")))

    def close(self) -> None:
        super().close()
        while self._stack:  # unclosed elements end with the document
            self._close(self._stack.pop())
        if self._title_parts is not None:
            self.title = " ".join("".join(self._title_parts).split())


_SKIPPED_BLOCKS = (b"script", b"style", b"svg", b"noscript", b"template")


def page_text(body: bytes, url: str, charset: str | None, budget: int) -> tuple[str, str, bool]:
    """(title, text, cut) of an HTML page. Script, style and SVG blocks are dropped before
    parsing (they are most of many pages' bytes and none of their text), then at most
    `budget` bytes are parsed; `cut` says the rest was not."""
    markup = _without_blocks(body)
    title, text = html_to_text(markup[:budget], url, charset)
    return title, text, len(markup) > budget


def _without_blocks(body: bytes) -> bytes:
    """Drop `<script>…</script>` and the like in one linear pass (a regex with a lazy
    `.*?` goes quadratic on a page of unclosed tags)."""
    lower = body.lower()
    out: list[bytes] = []
    pos = 0
    upcoming = {name: -1 for name in _SKIPPED_BLOCKS}  # next opening tag at or after pos
    while True:
        for name, at in upcoming.items():
            if 0 <= at < pos or at == -1:
                upcoming[name] = _open_tag(lower, name, pos)
        live = [(at, name) for name, at in upcoming.items() if at >= 0]
        if not live:
            out.append(body[pos:])
            break
        start, name = min(live)
        out.append(body[pos:start])
        tag_end = lower.find(b">", start)
        if tag_end > 0 and lower[tag_end - 1 : tag_end] == b"/":  # <svg ... />: nothing inside
            pos = tag_end + 1
            continue
        end = lower.find(b"</" + name, start)
        if end < 0:
            break  # unclosed: the rest of the page is inside it
        close = lower.find(b">", end)
        pos = len(body) if close < 0 else close + 1
    return b"".join(out)


def _open_tag(lower: bytes, name: bytes, pos: int) -> int:
    """Index of the next `<name` followed by a delimiter (not `<scripts`), else -2."""
    needle = b"<" + name
    while (at := lower.find(needle, pos)) >= 0:
        after = lower[at + len(needle) : at + len(needle) + 1]
        if after in (b"", b">", b"/", b" ", b"\t", b"\n", b"\r", b"\f"):
            return at
        pos = at + 1
    return -2


def _main() -> None:
    """`python web_text.py URL CHARSET BUDGET` < page > JSON: how web_fetch parses a page in
    a child process (this file imports only the standard library, so it runs as a script)."""
    import json
    import sys

    url, charset, budget = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
    title, text, cut = page_text(sys.stdin.buffer.read(), url, charset, budget)
    sys.stdout.write(json.dumps({"title": title, "text": text, "cut": cut}))


if __name__ == "__main__":
    _main()
