"""How a run's tools post to the chat it answers (`send_message`, `send_file`, ask_user's
choices): through the chat's adapter, each delivery confirmed or raising."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.base import Adapter, Button
from adapters.media import FileSender
from agent_core.inbound import ReplyTarget


class AdapterMessenger:
    """`send_message` for a run: delivers to the chat the run answers, confirmed or raising."""

    def __init__(self, adapter: Adapter, target: ReplyTarget) -> None:
        self._adapter = adapter
        self._target = ReplyTarget(target.platform, target.chat_id, target.thread_id)

    async def send(self, text: str) -> str:
        message_id = await self._adapter.send_text(self._target, text)
        return f"delivered as message {message_id}"

    async def send_file(self, filename: str, data: bytes, caption: str, send_as: str) -> str:
        """`send_file`: the adapter posts it (`adapters.media.FileSender`), confirmed or raising."""
        if not isinstance(self._adapter, FileSender):
            raise RuntimeError(f"{self._target.platform} cannot send files")
        message_id = await self._adapter.send_file(self._target, data, filename, caption=caption, send_as=send_as)  # type: ignore[arg-type]
        return f"delivered as message {message_id}"

    async def send_choices(self, text: str, choices: Sequence[tuple[str, str]]) -> str:
        """A message with buttons (ask_user's options); presses come back to press_button."""
        buttons = [Button(label[:64], action) for label, action in choices]
        return await self._adapter.send_text(self._target, text, buttons=buttons)
