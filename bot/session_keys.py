"""Session keys and scopes (DESIGN.md, Data flow step 2)."""

from __future__ import annotations

from agent_core.inbound import Inbound
from agent_core.risk import Scope

MAIN = "main"


def session_key(inbound: Inbound, *, is_owner: bool) -> str:
    if inbound.chat_kind == "private":
        return MAIN if is_owner else f"dm:{inbound.platform}:{inbound.sender_id}"
    key = f"group:{inbound.platform}:{inbound.chat_id}"
    return f"{key}:{inbound.thread_id}" if inbound.thread_id else key


JOB_PART = "job-"
"""An isolated job's session is its chat's key plus `:job-<id>` (no platform's chat or thread
id starts with "job-"): `main:job-<id>` keeps main's scope and memory, `group:…:job-<id>` and
`dm:…:job-<id>` the sub scope under their chat's policy (tests/test_scheduler_isolated.py)."""


def isolated_key(origin: str, job_id: str) -> str:
    """The session an isolated job runs in: its own transcript and daily log, never the
    chat's (workspace.daily_log.log_dir_for maps it)."""
    return f"{origin}:{JOB_PART}{job_id}"


def origin_of(key: str) -> str:
    """The chat session an isolated job's session belongs to (any other key: itself)."""
    head, _, last = key.rpartition(":")
    return head if head and last.startswith(JOB_PART) else key


def scope_of(key: str) -> Scope:
    return Scope.MAIN if key == MAIN or key.startswith(f"{MAIN}:{JOB_PART}") else Scope.SUB
