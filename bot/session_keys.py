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


def scope_of(key: str) -> Scope:
    return Scope.MAIN if key == MAIN else Scope.SUB
