"""Platform-neutral reply rendering: Markdown → entities, UTF-16 measures, chunk splitting."""

from __future__ import annotations

from adapters.render.chunks import ChunkSpec, cut_chunk, final_chunks, plan_chunks, render_source
from adapters.render.entities import Entity, Payload, slice_entities, valid_entities
from adapters.render.markdown import plain_payload, render_markdown
from adapters.render.split import (
    Cut,
    Fence,
    close_dangling_fence,
    next_markdown_cut,
    open_fence,
    split_entities,
    split_markdown,
)
from adapters.render.utf16 import Unit, index_for_units, measure, utf16_len

__all__ = [
    "ChunkSpec",
    "Cut",
    "Entity",
    "Fence",
    "Payload",
    "Unit",
    "close_dangling_fence",
    "cut_chunk",
    "final_chunks",
    "index_for_units",
    "measure",
    "next_markdown_cut",
    "open_fence",
    "plain_payload",
    "plan_chunks",
    "render_markdown",
    "render_source",
    "slice_entities",
    "split_entities",
    "split_markdown",
    "utf16_len",
    "valid_entities",
]
