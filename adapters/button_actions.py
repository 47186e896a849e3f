"""The button actions every platform carries, as plain strings.

An approval button carries `ap:<approval_id>:<o|a|d>`: an opaque id, never the action
itself, so it fits Telegram's 64-byte callback_data and Discord's 100-character custom_id
alike. Standalone messages' buttons (`adapters.base.Button`) carry an action with one of the
prefixes below; a platform adapter only has to get the string back to `bot/` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_core.approvals import Decision

APPROVAL_PREFIX = "ap:"
PAIR_PREFIX = "pair:"
"""The owner approves a pairing: "pair:<code>"."""
JOB_PREFIX = "job:"
"""A scheduled job's Run now / Pause / Cancel: "job:<op>:<id>"."""
RESUME_PREFIX = "resume:"
ASK_PREFIX = "ask:"
"""An ask_user option: "ask:<question>:<index>"; only the addressee's press answers."""

DECISION_CODES: dict[str, Decision] = {"o": Decision.ONCE, "a": Decision.ALWAYS, "d": Decision.DENY}
CODE_OF: dict[Decision, str] = {decision: code for code, decision in DECISION_CODES.items()}


@dataclass(frozen=True, slots=True)
class ApprovalPress:
    approval_id: str
    decision: Decision


def approval_action(approval_id: str, decision: Decision) -> str:
    """The action of one approval button: `ap:<id>:<o|a|d>`."""
    return f"{APPROVAL_PREFIX}{approval_id}:{CODE_OF[decision]}"


def parse_approval(action: str) -> ApprovalPress | None:
    """`ap:<id>:<o|a|d>` → ApprovalPress; None if `action` is not a well-formed approval press."""
    if not action.startswith(APPROVAL_PREFIX):
        return None
    approval_id, _, code = action[len(APPROVAL_PREFIX) :].rpartition(":")
    decision = DECISION_CODES.get(code)
    if not approval_id or decision is None:
        return None
    return ApprovalPress(approval_id, decision)
