"""Received files → what the model gets: images at the API's useful size in a format it
takes, PDFs as documents within the API's limits and as text beyond them, text capped,
anything unreadable described rather than sent broken."""

from __future__ import annotations

import base64
import io
from pathlib import PurePosixPath

from PIL import Image

from agent_core.media import IMAGE_MAX_EDGE, PDF_MAX_PAGES, TEXT_MAX_CHARS, prepare
from tests.media_support import image_size, jpeg, pdf

SAVED = PurePosixPath("inbox/f")


def _image(fmt: str, size: tuple[int, int], mode: str = "RGB", **save: object) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, (10, 200, 10, 128) if mode == "RGBA" else (10, 200, 10)).save(out, fmt, **save)
    return out.getvalue()


def _decoded(block: dict[str, object]) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(block["source"]["data"])))  # type: ignore[index]


def test_a_12_megapixel_jpeg_becomes_a_1568_px_jpeg() -> None:
    (block,) = prepare(jpeg(4000, 3000), "p.jpg", "image/jpeg", SAVED, image_allowed=True).blocks
    assert block["source"]["media_type"] == "image/jpeg"
    assert image_size(block) == (IMAGE_MAX_EDGE, 1176)


def test_transparency_stays_png_and_webp_becomes_jpeg() -> None:
    (png,) = prepare(_image("PNG", (2000, 500), "RGBA"), "a.png", "image/png", SAVED, image_allowed=True).blocks
    assert png["source"]["media_type"] == "image/png" and _decoded(png).mode == "RGBA"
    (webp,) = prepare(_image("WEBP", (100, 80)), "a.webp", "image/webp", SAVED, image_allowed=True).blocks
    assert webp["source"]["media_type"] == "image/jpeg" and image_size(webp) == (100, 80)


def test_an_animated_gif_sends_its_first_frame() -> None:
    frames = [Image.new("RGB", (50, 40), c) for c in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100)
    (block,) = prepare(out.getvalue(), "a.gif", "image/gif", SAVED, image_allowed=True).blocks
    r, g, b = _decoded(block).convert("RGB").getpixel((10, 10))
    assert r > 200 and b < 60


def test_a_broken_image_is_described_not_sent() -> None:
    ready = prepare(b"\xff\xd8\xffnot really", "x.jpg", "image/jpeg", SAVED, image_allowed=True)
    assert ready.blocks == () and "could not be read" in ready.note and "inbox/f" in ready.note


def test_over_the_image_cap_an_image_is_only_described() -> None:
    ready = prepare(jpeg(10, 10), "p.jpg", "image/jpeg", SAVED, image_allowed=False)
    assert ready.blocks == () and "too many images" in ready.note


def test_a_pdf_over_the_page_limit_becomes_its_text_with_a_note() -> None:
    (doc,) = prepare(pdf(3), "short.pdf", "application/pdf", SAVED, image_allowed=True).blocks
    assert doc["type"] == "document"
    ready = prepare(pdf(PDF_MAX_PAGES + 1), "long.pdf", "application/pdf", SAVED, image_allowed=True)
    assert [b["type"] for b in ready.blocks] == ["text"] and "pages" in ready.note and "its text" in ready.note


def test_text_is_capped_and_binary_is_described() -> None:
    (block,) = prepare(b"a," * 50_000, "big.csv", "text/csv", SAVED, image_allowed=True).blocks
    assert len(block["text"]) < TEXT_MAX_CHARS + 100
    other = prepare(b"\x00\x01" * 10, "blob.bin", "application/octet-stream", SAVED, image_allowed=True)
    assert other.blocks == () and "20 bytes" in other.note
