"""`ask_user` questions: a row first, then the question in the chat, then the run waits.

The addressee's next message (or button press) answers it: while the run waits in this
process the answer resolves its future and the same run goes on; after a restart the
question row is still pending and `resume` is called to continue from the stored transcript.
Only the addressee answers, by text or button: anyone else's press is refused, and their
text is an ordinary message that never stops the waiting run (`waiting_in`), even in the
`interrupt` queue mode.

With several processes on one database (replicas), the run may wait in another process than
the one the answer reaches: the answer is stored in the question's row, and `relay` tells
the waiting process, which takes it from the row (`take_answer`; `recheck` when a signal may
have been lost). Only a question whose run waits nowhere is resumed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol, runtime_checkable

from agent_core.events import QuestionAsked
from agent_core.prompt import ADDRESSED_SOURCE, frame_untrusted
from agent_core.risk import Scope
from agent_core.tools import ToolContext, ToolError

log = logging.getLogger(__name__)

QuestionState = Literal["pending", "answered", "cancelled"]
PREFIX = "ask:"
NOT_YOURS = "This question isn't for you."
STALE = "This question was already answered or is closed."
_NONE_KEPT = 4096


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    session_key: str
    run_id: str
    addressee: str
    text: str
    options: tuple[str, ...] = ()
    call_id: str = ""
    state: QuestionState = "pending"
    answer: str | None = None
    answered_by: str | None = None
    created_at: datetime = datetime.min.replace(tzinfo=UTC)


class QuestionStore(Protocol):
    async def add_question(self, question: Question) -> None: ...

    async def get_question(self, question_id: str) -> Question | None: ...

    async def pending_question(self, session_key: str) -> Question | None:
        """The session's newest pending question."""
        ...

    async def close_question(
        self, question_id: str, state: QuestionState, answer: str | None, by: str | None
    ) -> bool:
        """Atomically move a pending question to `state`; False if it was not pending."""
        ...


def answer_result(identity: str, answer: str, scope: Scope) -> str:
    """The ask_user tool result. In a sub scope the answer is a chat member's text, framed
    as untrusted like every other message there."""
    if scope is Scope.SUB:
        answer = frame_untrusted(answer, ADDRESSED_SOURCE)
    return f"The user ({identity}) answered: {answer}"


@runtime_checkable
class ChoiceMessenger(Protocol):
    """A messenger that can offer buttons; `action` comes back through the platform's button
    path (see `QuestionDesk.press`)."""

    async def send_choices(self, text: str, choices: Sequence[tuple[str, str]]) -> str: ...


class AnswerRelay(Protocol):
    """Other processes serving the same questions (replicas on one database)."""

    async def answer_elsewhere(self, question: Question) -> bool:
        """`question` was just answered (its row closed with the answer): whether its run
        waits in another process, which now goes on (False: it waits nowhere, resume it)."""
        ...


Resume = Callable[[Question, str, str], Awaitable[None]]
"""(question, answer, identity): continue a run a restart cut off, from its transcript."""

AnswerOutcome = Literal["answered", "resumed", "none"]


class QuestionDesk:
    """See the module docstring. One per process."""

    def __init__(self, store: QuestionStore, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._store = store
        self._now = now
        self._waiting: dict[str, asyncio.Future[tuple[str, str]]] = {}
        self._sessions: dict[str, str] = {}  # question id → session, while a run waits on it
        self.resume: Resume | None = None
        self.relay: AnswerRelay | None = None
        """Set when other processes may hold the waiting run (bot.app wires it); questions
        are then asked elsewhere too, so no session is ever known to have none."""
        self._closing = False
        # Sessions known to have no pending question: every message asks, and questions are
        # only created here, so a "none" stays true until this desk asks in that session.
        self._none: OrderedDict[str, None] = OrderedDict()

    def aclose(self) -> None:
        """The process is stopping: questions whose runs are cut off now stay pending, so the
        answer after the restart still reaches the task."""
        self._closing = True

    async def ask(self, ctx: ToolContext, text: str, options: Sequence[str]) -> str:
        """Store the question, show it, wait for the addressee's answer; returns the answer."""
        if ctx.messenger is None:
            raise ToolError("ask_user is not available here (no chat to ask in).")
        question = Question(
            uuid.uuid4().hex[:16], ctx.session_key, ctx.run_id, ctx.requester or "owner", text.strip(),
            tuple(o.strip() for o in options if o.strip())[:8], created_at=self._now(),
        )  # fmt: skip
        future: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self._waiting[question.id] = future
        self._sessions[question.id] = ctx.session_key
        self._none.pop(ctx.session_key, None)
        try:
            await self._store.add_question(question)  # a row before it is a prompt
            self._none.pop(ctx.session_key, None)  # again: a check may have run while it was stored
            if ctx.emit is not None:
                await ctx.emit(QuestionAsked(question.id, question.text, question.options))
            shown = f"❓ {question.text}"
            if question.options and isinstance(ctx.messenger, ChoiceMessenger):
                choices = [(o, f"{PREFIX}{question.id}:{i}") for i, o in enumerate(question.options)]
                await ctx.messenger.send_choices(shown, choices)
            else:
                if question.options:
                    shown += "\n" + "\n".join(f"{i + 1}. {o}" for i, o in enumerate(question.options))
                await ctx.messenger.send(shown)
            answer, by = await future
        except asyncio.CancelledError:
            if not self._closing:  # /stop: the question is closed, never left live
                await asyncio.shield(self._store.close_question(question.id, "cancelled", None, None))
            raise
        except BaseException:
            # Timed out or failed to show: closed, never left live.
            await asyncio.shield(self._store.close_question(question.id, "cancelled", None, None))
            raise
        finally:
            self._waiting.pop(question.id, None)
            self._sessions.pop(question.id, None)
        return answer_result(by, answer, ctx.scope)

    def waiting_in(self, session_key: str) -> bool:
        """Whether a run of this session waits here on a question: until its addressee
        answers, anyone else's message must not stop that run (it would end the question and
        their words would continue the task in the addressee's place)."""
        return session_key in self._sessions.values()

    async def answer(self, session_key: str, identity: str, text: str) -> AnswerOutcome:
        """A message in `session_key`: if it is the addressee's answer to a pending question,
        take it ("answered": the waiting run goes on; "resumed": a cut-off run continues)."""
        if session_key in self._none:
            return "none"
        question = await self._store.pending_question(session_key)
        if question is None:
            if self.relay is None:
                self._none[session_key] = None
            while len(self._none) > _NONE_KEPT:
                self._none.popitem(last=False)
            return "none"
        if question.addressee != identity:
            return "none"
        return await self._settle(question, text, identity)

    async def press(self, action: str, identity: str) -> tuple[bool, str]:
        """A button `ask:<id>:<n>`: (done, text for the presser)."""
        qid, _, index = action[len(PREFIX):].partition(":")
        question = await self._store.get_question(qid)
        if question is None or question.state != "pending" or not index.isdigit():
            return False, STALE
        if question.addressee != identity:
            log.info("question.button_refused", extra={"identity": identity, "question": qid})
            return False, NOT_YOURS
        if int(index) >= len(question.options):
            return False, STALE
        choice = question.options[int(index)]
        outcome = await self._settle(question, choice, identity)
        return (outcome != "none"), (f"✓ {choice}" if outcome != "none" else STALE)

    async def take_answer(self, question_id: str) -> bool:
        """Another process stored the answer to `question_id`: whether a run waits on it
        here (it goes on with the stored answer)."""
        future = self._waiting.get(question_id)
        if future is None:
            return False
        if not future.done():
            question = await self._store.get_question(question_id)
            if question is not None and question.state == "answered" and not future.done():
                future.set_result((question.answer or "", question.answered_by or question.addressee))
        return True

    async def recheck(self) -> None:
        """Re-read the questions runs wait on here: an answer stored by another process
        (its signal lost) lets the run go on now."""
        for question_id in list(self._waiting):
            await self.take_answer(question_id)

    async def _settle(self, question: Question, text: str, identity: str) -> AnswerOutcome:
        if not await self._store.close_question(question.id, "answered", text, identity):
            return "none"  # answered a moment ago (a double press)
        future = self._waiting.get(question.id)
        if future is not None and not future.done():
            future.set_result((text, identity))
            return "answered"
        if self.relay is not None and await self.relay.answer_elsewhere(question):
            return "answered"  # the run waits in another process: it goes on there
        if self.resume is not None:
            await self.resume(question, text, identity)
        return "resumed"
