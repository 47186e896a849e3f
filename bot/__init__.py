"""Roost's application layer (composition root, CLI, chat commands, storage, dashboard)."""

import sys as _sys

# httpx and httpx2 load their command-line client (click, pygments, rich: megabytes held
# for the life of `roost run`) whenever click is installed — and the mcp SDK installs it.
# Roost never runs that client; a None entry makes the import fail and httpx fall back.
for _cli in ("httpx._main", "httpx2._main"):
    _sys.modules.setdefault(_cli, None)  # type: ignore[arg-type]
