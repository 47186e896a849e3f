"""HTML → readable text for web_fetch: headings as '#', paragraphs and list items on their
own lines, links as [text](absolute url); scripts, styles, navigation and forms dropped."""

from __future__ import annotations

import re
from urllib.parse import urljoin

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bs4 import Tag

DROP = frozenset(
    {"script", "style", "nav", "noscript", "template", "svg", "iframe", "object", "embed",
     "form", "button", "select", "head", "canvas"}
)
BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "aside", "ul", "ol", "dl",
     "dt", "dd", "table", "thead", "tbody", "tr", "blockquote", "figure", "figcaption",
     "address", "details", "summary", "hr", "body", "html"}
)
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n{3,}")
_PRE_MARK = re.compile(r"\x00PRE(\d+)\x00")


def html_to_text(html: bytes | str, base_url: str, encoding: str | None = None) -> tuple[str, str]:
    """(title, text) of an HTML document."""
    from bs4 import BeautifulSoup  # imported on first fetch: it costs ~0.1 s at start-up

    soup = BeautifulSoup(html, "html.parser", from_encoding=encoding if isinstance(html, bytes) else None)
    title = " ".join(soup.title.get_text().split()) if soup.title else ""
    for tag in soup.find_all(DROP):
        tag.decompose()
    out: list[str] = []
    pre: list[str] = []
    _walk(soup, out, base_url, pre)
    text = "".join(out)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    text = _BLANKS.sub("\n\n", "\n".join(lines)).strip()
    # Preformatted blocks were kept aside so whitespace clean-up leaves them intact.
    return title, _PRE_MARK.sub(lambda m: _pick(pre, int(m.group(1))), text)


def _pick(blocks: list[str], index: int) -> str:
    return blocks[index] if index < len(blocks) else ""


def _walk(node: Tag, out: list[str], base: str, pre: list[str]) -> None:
    from bs4 import Comment, Doctype, NavigableString, ProcessingInstruction, Tag

    for child in node.children:
        if isinstance(child, (Comment, Doctype, ProcessingInstruction)):
            continue
        if isinstance(child, NavigableString):
            out.append(_SPACES.sub(" ", str(child).replace("\n", " ").replace("\x00", "")))
            continue
        if not isinstance(child, Tag):
            continue
        name = child.name
        if name in ("h1", "h2", "h3", "h4", "h5", "h6"):
            text = " ".join(child.get_text(" ").split())
            if text:
                out.append(f"\n\n{'#' * int(name[1])} {text}\n\n")
        elif name == "a":
            _link(child, out, base)
        elif name == "br":
            out.append("\n")
        elif name == "li":
            out.append("\n- ")
            _walk(child, out, base, pre)
        elif name == "pre":
            pre.append(f"```\n{child.get_text().strip(chr(10))}\n```")
            out.append(f"\n\n\x00PRE{len(pre) - 1}\x00\n\n")
        elif name in ("td", "th"):
            out.append(" | ")
            _walk(child, out, base, pre)
        elif name == "img":
            alt = (child.get("alt") or "").strip() if isinstance(child.get("alt"), str) else ""
            if alt:
                out.append(f"[image: {alt}]")
        elif name in BLOCKS:
            out.append("\n\n")
            _walk(child, out, base, pre)
            out.append("\n\n")
        else:
            _walk(child, out, base, pre)


def _link(tag: Tag, out: list[str], base: str) -> None:
    text = " ".join(tag.get_text(" ").split())
    href = tag.get("href")
    if not text:
        return
    if not isinstance(href, str) or href.startswith(("#", "javascript:", "mailto:")) or not href:
        out.append(text)
        return
    out.append(f"[{text}]({urljoin(base, href.strip())})")
