"""The serving process's long-lived objects are frozen out of the garbage collector."""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect once, then move every object still alive (the libraries' modules and types,
    settings, adapters, the model SDK — a few hundred thousand objects) to the permanent
    generation, so later full collections skip them.

    Without this a full collection walks them all, holding the GIL, on whichever thread
    triggers it: while the memory index chunked big files in a worker thread, the event loop
    — every chat — stalled for 0.2–0.9 s (`tests/test_loop_responsiveness.py`)."""
    gc.collect()
    gc.freeze()
