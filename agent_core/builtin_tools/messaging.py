"""The `send_message` and `send_file` tools (WRITE): send a message or a workspace file to
this session's chat via the Messenger.

Never reports a false "sent": no messenger, or a messenger that raises, is a ToolError.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from agent_core.builtin_tools._paths import display, read_bytes, resolve_in_workspace
from agent_core.risk import Risk
from agent_core.tools import Tool, ToolContext, ToolError
from workspace.access import is_main
from workspace.daily_log import session_dir_for

MAX_MESSAGE_CHARS = 20_000


class SendMessageInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="Message text.")


async def _send(args: SendMessageInput, ctx: ToolContext) -> str:
    if ctx.messenger is None:
        raise ToolError("message not sent: no chat is connected to this session")
    try:
        confirmation = await ctx.messenger.send(args.text)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the platform's reason goes to the model, verbatim
        raise ToolError(f"message not sent: {type(exc).__name__}: {exc}") from exc
    return f"sent ({confirmation})" if confirmation else "sent"


SEND_MESSAGE: Tool[SendMessageInput] = Tool(
    "send_message",
    "Send a separate message to this chat now (e.g. a progress note or a reminder). Your "
    "final answer is delivered anyway; do not repeat it here.",
    SendMessageInput,
    Risk.WRITE,
    _send,
    describe_action=lambda a: f"send message:\n\n{a.text}",
)


# --- send_file --------------------------------------------------------------------------

MAX_SEND_BYTES = 20 * 1024 * 1024
"""Below what both platforms take from a bot by default (Telegram 50 MB, Discord 25 MB)."""
PHOTO_MAX_BYTES = 10 * 1024 * 1024
_PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


class SendFileInput(BaseModel):
    path: str = Field(description="File path, relative to the workspace root.")
    caption: str = Field("", max_length=1000, description="Optional text shown with the file.")


def _file_to_send(ctx: ToolContext, raw: str) -> tuple[str, bytes]:
    real, rel = resolve_in_workspace(ctx, raw, "read")
    name = display(rel)
    if not is_main(str(ctx.scope)):
        # A sub scope sends only what is its own: never the identity files or skills it
        # may read, never anything another chat left (workspace.access).
        own = session_dir_for(ctx.session_key)
        if own is None or rel.parts[: len(own.parts)] != own.parts:
            where = f" ({own.as_posix()}/)" if own is not None else ""
            raise ToolError(f"{name}: this chat can only send files from its own folder{where}")
    data, size = read_bytes(real, rel, MAX_SEND_BYTES + 1)
    if size > MAX_SEND_BYTES:
        raise ToolError(f"{name}: {size:,} bytes; I send files up to {MAX_SEND_BYTES // (1024 * 1024)} MB")
    if not data:
        raise ToolError(f"{name}: the file is empty; nothing to send")
    return rel.name, data


async def _send_file(args: SendFileInput, ctx: ToolContext) -> str:
    sender = getattr(ctx.messenger, "send_file", None)
    if sender is None:
        raise ToolError("file not sent: this chat cannot receive files")
    filename, data = await asyncio.to_thread(_file_to_send, ctx, args.path)
    photo = filename.lower().endswith(_PHOTO_SUFFIXES) and len(data) <= PHOTO_MAX_BYTES
    try:
        confirmation = await sender(filename, data, args.caption, "photo" if photo else "document")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise ToolError(f"file not sent: {type(exc).__name__}: {exc}") from exc
    return f"sent {filename} ({len(data):,} bytes; {confirmation})"


SEND_FILE: Tool[SendFileInput] = Tool(
    "send_file",
    "Send a file from the workspace to this chat (images are shown as photos). In a group or "
    "a paired chat, only files in that chat's own folder can be sent.",
    SendFileInput,
    Risk.WRITE,
    _send_file,
    describe_action=lambda a: f"send file {a.path}" + (f"\n\n{a.caption}" if a.caption else ""),
)
