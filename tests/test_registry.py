"""Chat features plug into bot.registry (bot.features builds Roost's registry): what /help
lists is answered, and a press on a button nobody registered is told it is stale."""

from __future__ import annotations

import asyncio

import pytest

from adapters.base import ButtonAnswer
from bot.command_handlers import CommandHandlers
from bot.commands import COMMANDS, GROUP_COMMANDS, OWNER_COMMANDS
from bot.features import chat_registry
from bot.registry import STALE, Registry


def test_every_command_help_lists_is_answered() -> None:
    """A feature left out of chat_registry would answer "Unknown command /jobs"."""
    builtin = {name.removeprefix("_cmd_") for name in dir(CommandHandlers) if name.startswith("_cmd_")}
    plugged = set(chat_registry().commands)
    group_only = {"disallow"}  # answered before routing, by CommandHandlers.group_admin
    unanswered = set(COMMANDS) | set(GROUP_COMMANDS) | set(OWNER_COMMANDS)
    unanswered -= builtin | plugged | group_only
    assert not unanswered, f"listed by /help but answered by nothing: {sorted(unanswered)}"
    assert not builtin & plugged, "a command registered twice: the feature's would never run"


def test_every_button_roost_sends_has_a_press_handler() -> None:
    registry = chat_registry()
    for action in ("resume:run-1", "ask:q1:0", "job:run:j1"):
        assert any(action.startswith(prefix) for prefix in registry.buttons), action


def test_a_press_on_an_unknown_button_is_told_it_is_stale() -> None:
    answer = asyncio.run(Registry().press(None, "gone:42", "telegram:1"))  # type: ignore[arg-type]
    assert answer == ButtonAnswer(STALE, done=False)


def test_overlapping_registrations_are_refused() -> None:
    registry = chat_registry()
    with pytest.raises(ValueError):
        registry.command("jobs", registry.commands["jobs"])
    with pytest.raises(ValueError):
        registry.button("job:run:", registry.buttons["job:"])
