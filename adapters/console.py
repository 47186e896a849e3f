"""The terminal chat: the owner's main session in a terminal, on the same core.

Answers stream as they are written, tool activity shows as status lines, and a risky call
asks `approve? [y]es / [a]lways in this session / [n]o` before it runs. Lines typed while an
answer streams are queued like any other message; Ctrl-C stops the running answer.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from typing import IO

from collections.abc import Sequence

from adapters.base import Button, InboundHandler
from agent_core.approvals import Decision, show_controls
from agent_core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    PlanProgress,
    ThinkingChanged,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEnded,
    WorkersChanged,
)
from agent_core.inbound import Inbound, ReplyTarget

APPROVAL_PROMPT = "approve? [y]es / [a]lways in this session / [n]o "
ANSWERS = {"y": Decision.ONCE, "yes": Decision.ONCE, "a": Decision.ALWAYS, "always": Decision.ALWAYS,
           "n": Decision.DENY, "no": Decision.DENY}
IDENTITY = "console:owner"


class ConsoleAdapter:
    platform = "console"

    def __init__(self, stdin: IO[str] | None = None, stdout: IO[str] | None = None, user_name: str = "owner") -> None:
        # Bytes that are not UTF-8 become U+FFFD here, never lone surrogates that would make
        # every later request of the shared main session fail to encode.
        self._in = stdin or io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self._out = stdout or sys.stdout
        self._user_name = user_name
        self._handler: InboundHandler | None = None
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._pending_approvals: list[ApprovalRequested] = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._counter = 0
        self._mid_line = False
        self._eof = False
        self._tasks: set[asyncio.Task[object]] = set()

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        loop = asyncio.get_running_loop()

        def read() -> None:
            try:
                for line in iter(self._in.readline, ""):
                    loop.call_soon_threadsafe(self._lines.put_nowait, line.rstrip("\n"))
            finally:  # end of input, or a read error: either way the session ends cleanly
                loop.call_soon_threadsafe(self._lines.put_nowait, None)

        threading.Thread(target=read, name="console-stdin", daemon=True).start()

    async def aclose(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._write("\n" if self._mid_line else "")

    async def repl(self) -> None:
        """Read lines until end of input; return when the last answer is done."""
        assert self._handler is not None, "start() first"
        self._write("Roost terminal chat — main session. /help for commands, Ctrl-D to quit.\n")
        self._prompt()
        while (line := await self._next_line()) is not None:
            if self._pending_approvals:
                await self._answer_approval(line)
                continue
            if not line.strip():
                self._prompt()
                continue
            self._counter += 1
            self._idle.clear()
            queued = await self._handler.receive(
                Inbound("console", "private", "console", "owner", self._user_name, line, message_id=str(self._counter))
            )
            if queued:
                await self._wait_idle_or_line()
            else:
                self._idle.set()
                self._prompt()
        await self._idle.wait()

    async def _wait_idle_or_line(self) -> None:
        # Keep reading (approval answers, queued messages) while the answer streams.
        idle = asyncio.create_task(self._idle.wait())
        try:
            while not self._idle.is_set():
                line_task = asyncio.create_task(self._lines.get())
                done, _ = await asyncio.wait({idle, line_task}, return_when=asyncio.FIRST_COMPLETED)
                if line_task not in done:
                    line_task.cancel()
                    break
                line = line_task.result()
                if line is None:
                    await self._deny_pending()
                    await idle
                    self._lines.put_nowait(None)
                    break
                if self._pending_approvals:
                    await self._answer_approval(line)
                elif line.strip():
                    await self._handler.receive(  # type: ignore[union-attr]
                        Inbound("console", "private", "console", "owner", self._user_name, line)
                    )
        finally:
            idle.cancel()
        self._prompt()

    async def _next_line(self) -> str | None:
        line = await self._lines.get()
        if line is None:
            await self._deny_pending()
        return line

    async def _deny_pending(self) -> None:
        """End of input: nobody is left to answer, so pending approvals are denied now
        rather than after their expiry, and later ones are denied as they come."""
        self._eof = True
        pending, self._pending_approvals = self._pending_approvals, []
        for request in pending:
            await self._handler.decide(request.approval_id, Decision.DENY, IDENTITY)  # type: ignore[union-attr]

    async def _answer_approval(self, line: str) -> None:
        decision = ANSWERS.get(line.strip().lower())
        if decision is None:
            self._write(APPROVAL_PROMPT)
            return
        request = self._pending_approvals.pop(0)
        assert self._handler is not None
        await self._handler.decide(request.approval_id, decision, IDENTITY)
        if self._pending_approvals:
            self._show_approval(self._pending_approvals[0])

    def open_reply(self, target: ReplyTarget) -> ConsoleReply:
        self._idle.clear()  # a queued message's run starts: not idle until it closes
        return ConsoleReply(self)

    async def close_expired_card(self, record: object) -> None:
        pass  # terminal prompts end with their process

    async def mark_interrupted(self, delivery: object) -> None:
        pass  # the terminal has no earlier messages to edit

    async def is_chat_admin(self, chat_id: str, user_id: str) -> bool:
        return False  # the terminal has no groups

    async def send_text(self, target: ReplyTarget, text: str, *, buttons: Sequence[Button] = ()) -> str:
        self._line_break()
        self._write(f"{text}\n")
        return "console"

    # --- output ---------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if text:
            self._out.write(text)
            self._out.flush()
            self._mid_line = not text.endswith("\n")

    def _line_break(self) -> None:
        if self._mid_line:
            self._write("\n")

    def _prompt(self) -> None:
        self._line_break()
        self._write("you> ")

    def _show_approval(self, request: ApprovalRequested) -> None:
        self._line_break()
        self._write(f"\n⚠ {request.tool_name} wants to run:\n{request.action}\n{APPROVAL_PROMPT}")

    def _approval_requested(self, request: ApprovalRequested) -> None:
        if self._eof:
            assert self._handler is not None
            self._tasks.add(task := asyncio.create_task(
                self._handler.decide(request.approval_id, Decision.DENY, IDENTITY)))
            task.add_done_callback(self._tasks.discard)
            return
        self._pending_approvals.append(request)
        if len(self._pending_approvals) == 1:
            self._show_approval(request)

    def _approval_gone(self, approval_id: str, decision: str) -> None:
        before = len(self._pending_approvals)
        self._pending_approvals = [a for a in self._pending_approvals if a.approval_id != approval_id]
        if len(self._pending_approvals) != before:
            self._line_break()
            self._write(f"(approval {decision})\n")


class ConsoleReply:
    def __init__(self, console: ConsoleAdapter) -> None:
        self._c = console
        self._started = False

    async def handle(self, event: Event) -> None:
        c = self._c
        match event:
            case TextDelta(text=text):
                if not self._started:
                    c._line_break()
                    c._write("roost> ")
                    self._started = True
                c._write(text)
            case TurnEnded():
                if self._started:
                    c._line_break()
                    self._started = False
            case ToolStarted(name=name, input=tool_input):
                c._line_break()
                c._write(f"  ⚙ {name} {_brief(tool_input)}\n")
            case ToolFinished(name=name, is_error=is_error, output=output, duration_s=duration):
                mark = "✗" if is_error else "✓"
                detail = f": {output.splitlines()[0][:100]}" if is_error and output else ""
                c._write(f"  {mark} {name} ({duration:.1f} s){detail}\n")
            case ApprovalRequested():
                c._approval_requested(event)
            case ApprovalResolved(approval_id=approval_id, decision=decision):
                c._approval_gone(approval_id, decision)
            case RunFinished(text=text):
                if not text:
                    c._line_break()
                    c._write("roost> (no answer)\n")
            case RunFailed(message=message):
                c._line_break()
                c._write(f"✗ {message}\n")
            case PlanProgress():
                c._line_break()
                c._write(f"  📋 {show_controls(event.line())}\n")
            case ThinkingChanged(active=True):
                c._line_break()
                c._write("  💭 thinking…\n")
            case WorkersChanged(running=running):
                c._line_break()
                c._write(f"  👷 {running} worker{'s' if running != 1 else ''} running\n")
            case _:
                pass

    async def aclose(self, *, cancelled: bool = False) -> None:
        c = self._c
        if cancelled:
            c._line_break()
            c._write("(stopped)\n")
        c._line_break()
        c._pending_approvals.clear()
        c._idle.set()


def _brief(tool_input: dict[str, object]) -> str:
    # Escaped: an ESC sequence here (e.g. \x1b[8m, "conceal") would hide the approval below.
    if "command" in tool_input:
        return show_controls(str(tool_input["command"]))[:200]
    text = ", ".join(f"{k}={v!r}" for k, v in tool_input.items())
    return show_controls(text)[:200]
