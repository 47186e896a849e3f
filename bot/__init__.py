"""Roost's application layer (composition root, CLI, chat commands, storage, dashboard)."""

import sys as _sys

# httpx and httpx2 load their command-line client (click, pygments, rich: megabytes held
# for the life of `roost run`) whenever click is installed — and the mcp SDK installs it.
# Roost never runs that client; a None entry makes the import fail and httpx fall back.
for _cli in ("httpx._main", "httpx2._main"):
    _sys.modules.setdefault(_cli, None)  # type: ignore[arg-type]

# httpcore and httpcore2 import trio whenever it is installed (selenium, a test dependency,
# brings it, and trio brings attrs: ~2 MB for the life of `roost run`), though Roost runs on
# asyncio only; hidden while they load, they fall back to asyncio's primitives.
from bot.lean_imports import hidden as _hidden  # noqa: E402

with _hidden("trio"):
    for _lib in ("httpcore._synchronization", "httpcore2._synchronization"):
        try:
            __import__(_lib)
        except ImportError:  # not installed: nothing to keep out
            pass
