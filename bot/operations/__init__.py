"""The operations layer: every verb Roost's surfaces offer (chat commands, the CLI, the
dashboard), each checking who acts once. See `core.Operations`."""

from __future__ import annotations

from bot.operations.actor import CLI, Actor, Forbidden, chat_actor
from bot.operations.core import AuditQuery, Live, Operations

__all__ = ["CLI", "Actor", "AuditQuery", "Forbidden", "Live", "Operations", "chat_actor"]
