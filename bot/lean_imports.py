"""Keep optional dependencies a library would import but Roost never uses out of a process.

A module imported once stays in memory for the life of the process, and `roost run` lives
long: bench/bench_rss.py measures what each of these costs. Setting `sys.modules[name]` to
None makes `import name` raise ImportError, which the libraries below treat as "extra not
installed" and fall back from:

- tornado: python-telegram-bot's webhook server (~3 MB); a polling bot never serves HTTP.
- aiohttp (+ yarl, multidict, attrs, frozenlist, ...): the anthropic SDK imports its vendored
  aiohttp transport only to offer `DefaultAioHttpClient`; Roost uses its httpx transport
  (~8 MB).
- trio (+ attrs): httpcore and httpcore2 import it whenever it is installed; hidden while they
  load (bot/__init__).
- click: httpx imports its command-line client (click, rich, pygments) whenever click is
  installed, and uvicorn (the dashboard) installs it; hidden while httpx loads (bot/__init__).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def hidden(name: str, *, when: bool = True, unless_loaded: tuple[str, ...] = ()) -> Iterator[None]:
    """Within the block, `import name` fails as if it were not installed.

    Does nothing when `when` is false, or when `name` (or any of `unless_loaded`) is already
    imported: then it is in memory anyway, or the library that needs it decided already."""
    if not when or name in sys.modules or any(m in sys.modules for m in unless_loaded):
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
