"""Inline button presses (callback queries): approvals, pairing, and anything stale.

Contract: every callback query is answered exactly once (a redelivered query is ignored).
- `ap:<id>:<o|a|d>` → `InboundHandler.decide(id, decision, "telegram:<user id>")`:
  RESOLVED → a short toast (the run's `ApprovalResolved` edits the card; if no run is
  rendering that card any more, the card is edited here from the database row);
  NOT_YOURS → alert "This approval isn't yours." and nothing changes;
  ALREADY_DECIDED → alert naming the outcome (dead buttons on an orphaned card are removed);
  UNKNOWN → alert, and the buttons are removed (they can never work).
- `pair:<code>` → `InboundHandler.approve_pairing("telegram", code, identity)`; the message
  that carried the button is edited to show the result, its button removed.
- `job:<op>:<id>`, `resume:<run id>` → `InboundHandler.press_button(...)`: done → the message shows the result
  and loses its buttons; refused → an alert, nothing changes.
- anything else (forged, or a button from before a restart) → a polite "no longer active".
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from telegram import Bot, CallbackQuery, Message
from telegram.error import TelegramError

from adapters.errors import DeliveryError
from adapters.outbox import Priority
from adapters.render.entities import Payload
from adapters.button_actions import ASK_PREFIX, JOB_PREFIX, PAIR_PREFIX, RESUME_PREFIX, ApprovalPress, parse_approval
from adapters.cards import outcome_text
from adapters.pacing import through_outbox
from adapters.telegram.approval_cards import record_payload
from adapters.telegram.callback_data import CallbackCodec
from adapters.telegram.reply import ReplyContext
from adapters.telegram.transport import call
from agent_core.approvals import ResolveOutcome
from agent_core.ports import ApprovalRecord

log = logging.getLogger(__name__)

NOT_YOURS = "This approval isn't yours."
STALE = "This button is no longer active."
FAILED = "Something went wrong; please try again."
_ANSWER_LIMIT = 200  # Telegram's limit for a callback answer's text
_REMEMBERED_QUERIES = 1024


@dataclass(frozen=True, slots=True)
class Answer:
    text: str | None = None
    alert: bool = False


class CallbackHandler:
    """See the module docstring. One per adapter."""

    def __init__(self, ctx: ReplyContext, codec: CallbackCodec) -> None:
        self._ctx = ctx
        self._bot = ctx.bot
        self._handler = ctx.handler
        self._cards = ctx.cards
        self._codec = codec
        self._outbox = ctx.outbox
        self._seen: OrderedDict[str, None] = OrderedDict()

    async def handle(self, query: CallbackQuery) -> None:
        if query.id in self._seen:
            log.info("telegram.callback_duplicate query=%s", query.id)
            return
        self._seen[query.id] = None
        if len(self._seen) > _REMEMBERED_QUERIES:
            self._seen.popitem(last=False)
        try:
            answer = await self._route(query)
        except Exception:  # task boundary: the presser still gets an answer
            log.exception("telegram.callback_failed query=%s", query.id)
            answer = Answer(FAILED, alert=True)
        await self._answer(query, answer)

    async def _route(self, query: CallbackQuery) -> Answer:
        identity = f"telegram:{query.from_user.id}"
        self._cards.names[identity] = query.from_user.full_name or str(query.from_user.id)
        action = self._codec.decode(query.data)
        if action is None:
            return Answer(STALE)
        press = parse_approval(action)
        if press is not None:
            return await self._approval(query, press, identity)
        if action.startswith(PAIR_PREFIX):
            return await self._pairing(query, action[len(PAIR_PREFIX) :], identity)
        if action.startswith((JOB_PREFIX, RESUME_PREFIX, ASK_PREFIX)):
            return await self._button(query, action, identity)
        log.info("telegram.callback_unknown data=%r", action[:64])
        return Answer(STALE)

    async def _approval(self, query: CallbackQuery, press: ApprovalPress, identity: str) -> Answer:
        result = await self._handler.decide(press.approval_id, press.decision, identity)
        record, live = result.record, self._cards.is_live(press.approval_id)
        match result.outcome:
            case ResolveOutcome.RESOLVED:
                if record is not None and not live and not result.elsewhere:
                    await self._show_record(query, record)
                return Answer(outcome_text(press.decision.value, None) + ".")
            case ResolveOutcome.NOT_YOURS:
                return Answer(NOT_YOURS, alert=True)
            case ResolveOutcome.ALREADY_DECIDED:
                if record is None:
                    return Answer("This approval was already decided.", alert=True)
                if not live and not result.elsewhere:  # else the run's own replica shows it
                    await self._show_record(query, record)
                if record.state == "expired":
                    return Answer("This approval expired — nothing was run.", alert=True)
                who = self._cards.who(record.resolved_by)
                return Answer(f"Already decided: {outcome_text(record.state, who)}.", alert=True)
            case _:
                await self._edit(query, None)
                return Answer("I don't know this approval any more; nothing was run.", alert=True)

    async def _pairing(self, query: CallbackQuery, code: str, identity: str) -> Answer:
        result = await self._handler.approve_pairing("telegram", code, identity)
        message = query.message
        if isinstance(message, Message) and message.text:
            await self._edit(query, Payload(f"{message.text}\n\n{result}"))
        return Answer(result[:_ANSWER_LIMIT])

    async def _button(self, query: CallbackQuery, action: str, identity: str) -> Answer:
        """A generic button (scheduled jobs): the handler decides; a refusal changes nothing."""
        result = await self._handler.press_button("telegram", action, identity)
        message = query.message
        if result.done and isinstance(message, Message) and message.text:
            await self._edit(query, Payload(f"{message.text}\n\n{result.text}"))
        return Answer(result.text[:_ANSWER_LIMIT], alert=not result.done)

    async def _show_record(self, query: CallbackQuery, record: ApprovalRecord) -> None:
        """Edit an orphaned card (no run renders it) to show its row's state, no buttons."""
        await self._edit(query, record_payload(record, self._cards.who(record.resolved_by)))

    async def _edit(self, query: CallbackQuery, payload: Payload | None) -> None:
        """Replace the pressed message's text (None: keep it) and remove its buttons, if it
        still has any: a stale press on an already-updated message changes nothing."""
        message = query.message
        if not isinstance(message, Message) or message.reply_markup is None:
            return
        if not message.reply_markup.inline_keyboard:
            return
        thread = message.message_thread_id if message.is_topic_message else None
        transport = self._ctx.transport(str(message.chat.id), thread)

        async def edit() -> None:
            if payload is None:
                await _remove_buttons(self._bot, message)
            else:
                await transport.edit_message(str(message.message_id), payload.text, payload.entities)

        try:
            await through_outbox(
                self._outbox,
                transport.chat_key,
                edit,
                interval=transport.min_edit_interval_s,
                pace=transport.pace,
                priority=Priority.EDIT,
            )
        except DeliveryError as exc:
            log.warning("telegram.callback_edit_failed message=%s: %s", message.message_id, exc)

    async def _answer(self, query: CallbackQuery, answer: Answer) -> None:
        text = answer.text[:_ANSWER_LIMIT] if answer.text else None
        try:
            await self._bot.answer_callback_query(query.id, text=text, show_alert=answer.alert)
        except TelegramError as exc:  # too old, or flood control: the press was handled anyway
            log.warning("telegram.callback_answer_failed query=%s: %s", query.id, exc)


async def _remove_buttons(bot: Bot, message: Message) -> None:
    await call(lambda: bot.edit_message_reply_markup(message.chat.id, message.message_id, reply_markup=None))
