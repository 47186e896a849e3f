"""Received files → model content blocks. Pure, CPU-bound functions (the caller runs them
off the event loop); Pillow and pypdf are imported only when a file arrives, so a process
that never sees one never loads them.

- images: first frame, EXIF orientation applied, long edge ≤ 1568 px (what the API uses;
  larger only costs upload time), JPEG (PNG when there is transparency) → an image block;
- PDFs within the API's limits (32 MB, 100 pages) → a document block; beyond them the text
  pypdf extracts, capped, with a note saying so;
- text-like files (code, CSV, Markdown, JSON…) → their text, capped;
- anything else → a one-line description; the model can `read_file` the saved copy.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

IMAGE_MAX_EDGE = 1568
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})
PDF_MAX_BYTES = 32 * 1024 * 1024
PDF_MAX_PAGES = 100
TEXT_MAX_CHARS = 20_000
TEXT_SUFFIXES = frozenset(
    "txt md markdown csv tsv json jsonl yaml yml toml ini cfg conf log xml html htm css js ts py rb go rs "
    "java kt c h cpp hpp cs sh bash zsh sql r swift php pl lua tex rst org ipynb env".split()
)
TEXT_MIMES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/sql",
                        "application/javascript", "application/x-sh", "application/toml"})


class Unreadable(Exception):
    """The file is not what it claims (a broken image, a PDF pypdf cannot open)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """One file ready for the model: `blocks` (image/document/text) and a `note` for the
    message text saying what it is and where it was saved."""

    blocks: tuple[dict[str, Any], ...]
    note: str


def describe(name: str, mime: str, size: int, saved: PurePosixPath) -> str:
    return f"[file {name or saved.name} ({mime or 'unknown type'}, {size:,} bytes) saved as {saved}]"


def is_image(name: str, mime: str) -> bool:
    return mime in IMAGE_TYPES or PurePosixPath(name.lower()).suffix in (".jpg", ".jpeg", ".png", ".webp", ".gif")


def is_pdf(name: str, mime: str) -> bool:
    return mime == "application/pdf" or name.lower().endswith(".pdf")


def is_text_like(name: str, mime: str) -> bool:
    suffix = PurePosixPath(name.lower()).suffix.lstrip(".")
    return mime.startswith("text/") or mime in TEXT_MIMES or suffix in TEXT_SUFFIXES


def image_block(data: bytes) -> dict[str, Any]:
    """The image as the API's base64 image block, resized and converted (see the module)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.seek(0)  # an animated GIF or WebP: its first frame
            if img.format == "JPEG":
                # Decode at 1/2, 1/4 or 1/8 scale when that still leaves ≥ 1568 px on the
                # long edge: a 12-megapixel phone photo decodes ~4× faster.
                scale = IMAGE_MAX_EDGE / max(img.size)
                img.draft("RGB", (max(1, int(img.size[0] * scale)), max(1, int(img.size[1] * scale))))
            frame = ImageOps.exif_transpose(img) or img
            frame.load()
            alpha = frame.mode in ("RGBA", "LA") or (frame.mode == "P" and "transparency" in frame.info)
            frame = frame.convert("RGBA" if alpha else "RGB")
            frame.thumbnail((IMAGE_MAX_EDGE, IMAGE_MAX_EDGE), Image.Resampling.LANCZOS)
            out = io.BytesIO()
            if alpha:
                frame.save(out, "PNG", optimize=True)
            else:
                frame.save(out, "JPEG", quality=85, optimize=True)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise Unreadable(f"that image could not be read ({type(exc).__name__})") from None
    media_type = "image/png" if alpha else "image/jpeg"
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": base64.b64encode(out.getvalue()).decode("ascii")}}


def pdf_blocks(data: bytes, name: str) -> tuple[tuple[dict[str, Any], ...], str]:
    """A document block when the API takes the PDF, else its extracted text; and a note."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = len(reader.pages)
    except (PdfReadError, ValueError, OSError, KeyError) as exc:
        raise Unreadable(f"that PDF could not be read ({type(exc).__name__})") from None
    if len(data) <= PDF_MAX_BYTES and pages <= PDF_MAX_PAGES:
        block = {"type": "document", "title": name[:200] or "document.pdf",
                 "source": {"type": "base64", "media_type": "application/pdf",
                            "data": base64.b64encode(data).decode("ascii")}}
        return (block,), f"{pages} page(s)"
    parts: list[str] = []
    total = 0
    for page in reader.pages:
        try:
            text = page.extract_text() or ""
        except Exception:  # one bad page must not lose the rest
            text = ""
        parts.append(text)
        total += len(text)
        if total > TEXT_MAX_CHARS:
            break
    text = "\n".join(parts)[:TEXT_MAX_CHARS].strip() or "(no extractable text)"
    note = (f"{pages} pages, {len(data):,} bytes: beyond what the model reads as a PDF "
            f"({PDF_MAX_PAGES} pages, {PDF_MAX_BYTES // (1024 * 1024)} MB); its text, first {TEXT_MAX_CHARS:,} characters at most")
    return ({"type": "text", "text": f"Text of {name}:\n{text}"},), note


def text_block(data: bytes, name: str) -> tuple[dict[str, Any], str]:
    text = data.decode("utf-8", errors="replace")
    capped = text[:TEXT_MAX_CHARS]
    note = "" if len(text) <= TEXT_MAX_CHARS else f"first {TEXT_MAX_CHARS:,} of {len(text):,} characters"
    return {"type": "text", "text": f"Contents of {name}:\n{capped.strip() or '(empty)'}"}, note


def prepare(data: bytes, name: str, mime: str, saved: PurePosixPath, *, image_allowed: bool) -> Prepared:
    """See the module docstring. `image_allowed` False (the turn's image cap is reached):
    an image is only described."""
    where = describe(name, mime, len(data), saved)
    try:
        if is_image(name, mime):
            if not image_allowed:
                return Prepared((), f"{where} (not shown: too many images in one message)")
            return Prepared((image_block(data),), where)
        if is_pdf(name, mime):
            blocks, note = pdf_blocks(data, name or saved.name)
            return Prepared(blocks, f"{where} ({note})")
        if is_text_like(name, mime):
            block, note = text_block(data, name or saved.name)
            return Prepared((block,), f"{where}" + (f" ({note})" if note else ""))
    except Unreadable as exc:
        return Prepared((), f"{where} ({exc})")
    return Prepared((), where)
