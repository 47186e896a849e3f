"""Button actions ↔ Telegram `callback_data` (at most 64 bytes).

Approval buttons carry `ap:<approval_id>:<o|a|d>` (`adapters.button_actions`): an opaque
id, never the action itself. Any other action (e.g. "pair:<code>") travels as is when it fits; a longer one travels as
`k:<digest>` with the action remembered in memory, so after a restart such a button gets
the "no longer active" answer instead of doing something unexpected.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from adapters.button_actions import approval_action
from agent_core.approvals import Decision

MAX_BYTES = 64
_KEYED_PREFIX = "k:"
_MAX_REMEMBERED = 4096


class CallbackCodec:
    """See the module docstring. One per adapter."""

    def __init__(self) -> None:
        self._long: OrderedDict[str, str] = OrderedDict()

    def encode(self, action: str) -> str:
        if 0 < len(action.encode()) <= MAX_BYTES and not action.startswith(_KEYED_PREFIX):
            return action
        key = _KEYED_PREFIX + hashlib.blake2b(action.encode(), digest_size=16).hexdigest()
        self._long[key] = action
        self._long.move_to_end(key)
        while len(self._long) > _MAX_REMEMBERED:
            self._long.popitem(last=False)
        return key

    def decode(self, data: str | None) -> str | None:
        """The action behind `data`, or None if it is unknown (forgotten or forged)."""
        if not data:
            return None
        if data.startswith(_KEYED_PREFIX):
            return self._long.get(data)
        return data

    def approval(self, approval_id: str, decision: Decision) -> str:
        return self.encode(approval_action(approval_id, decision))

