"""Roost's application layer (composition root, CLI, chat commands, storage, dashboard)."""

from bot.lean_imports import hidden as _hidden

# httpx imports its command-line client (click, rich, pygments: several MB for the life of
# `roost run`) whenever click is installed — and uvicorn, the dashboard's server, installs it.
# Roost never runs httpx's CLI; without click httpx falls back to a stub.
with _hidden("click", unless_loaded=("httpx",)):
    import httpx  # noqa: F401
