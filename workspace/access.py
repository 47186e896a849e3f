"""Which workspace paths a session may see: the privacy rule of the main and sub scopes.

The main session (the owner) sees the whole workspace. A sub session (a group, another
user's DM) never sees USER.md, MEMORY.md or any daily log but its own; every path-taking
tool and the context builder ask `may_access` after resolving symlinks.
"""

from __future__ import annotations

from pathlib import PurePath

from workspace.daily_log import MAIN_KEY, MEMORY_DIR, log_dir_for

MAIN_SCOPE = "main"
SUB_SCOPE = "sub"
PRIVATE_FILES = frozenset({"user.md", "memory.md"})
"""Top-level files only the main scope may read or write (compared case-insensitively)."""


def is_main(scope: str) -> bool:
    """True for the main scope. Accepts `agent_core.risk.Scope` members (a StrEnum) or their
    string values; anything else raises ValueError."""
    value = str(getattr(scope, "value", scope))
    if value == MAIN_SCOPE:
        return True
    if value == SUB_SCOPE:
        return False
    raise ValueError(f"unknown scope: {scope!r}")


def check_session(session_key: str, scope: str) -> None:
    """Reject a sub scope paired with the main session key (it would expose main's logs)."""
    if not is_main(scope) and session_key == MAIN_KEY:
        raise ValueError("the main session cannot run in the sub scope")
    log_dir_for(session_key)  # validates the key


def may_access(rel: PurePath, session_key: str, scope: str) -> bool:
    """May this session read or write `rel` (a path relative to the workspace root, with
    symlinks already resolved)? Ancestors of the session's own log directory are allowed so
    it can be listed and navigated to."""
    if is_main(scope):
        return True
    parts = tuple(p.casefold() for p in rel.parts)
    if not parts or parts == (".",):
        return True
    if len(parts) == 1 and parts[0] in PRIVATE_FILES:
        return False
    if parts[0] == MEMORY_DIR:
        own = tuple(p.casefold() for p in log_dir_for(session_key).parts)
        return parts[: len(own)] == own or own[: len(parts)] == parts
    return True
