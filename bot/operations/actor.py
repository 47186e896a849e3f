"""Who is acting on an operation, and the one role check every verb makes."""

from __future__ import annotations

from dataclasses import dataclass

from bot.roles import Role

_RANK = {Role.OWNER: 4, Role.APPROVER: 3, Role.PAIRED: 2, Role.MEMBER: 1, Role.STRANGER: 0}


class Forbidden(Exception):
    """The actor's role does not allow this operation; the message says so to a person."""


@dataclass(frozen=True, slots=True)
class Actor:
    identity: str
    """As the audit trail names them: "telegram:42", "cli", "console:owner"."""
    role: Role
    via: str
    """The surface acting: "chat", "cli", "dashboard"."""

    def require(self, role: Role, what: str) -> None:
        """Raise Forbidden unless this actor's role is `role` or higher."""
        if _RANK[self.role] < _RANK[role]:
            raise Forbidden(f"Only {'an owner' if role is Role.OWNER else f'an {role.value} or owner'} can {what}.")


def chat_actor(identity: str, *, is_owner: bool) -> Actor:
    """The person behind a chat command or button press. The chat checked who they are
    (route, private chat) before calling; anyone but an owner gets the lowest role that can
    write, so the layer refuses them too."""
    return Actor(identity, Role.OWNER if is_owner else Role.MEMBER, "chat")


CLI = Actor("cli", Role.OWNER, "cli")
"""Whoever runs `roost …` on the machine: the owner (they hold the database)."""
