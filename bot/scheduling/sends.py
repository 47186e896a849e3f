"""Sends of the scheduler that must reach their chat or be accounted for: a job's answer
waiting to be re-sent, a missed-run notice, a report to the owner.

Each is a row (bot.storage.sends) written before its first attempt and kept `pending` until
the platform confirms it, so a restart resumes it (`resume`) instead of losing it. Every
attempt of one send carries the same key and nonce (`adapters.base.OnceSender`), so an
attempt whose answer was lost is never simply repeated: the next attempt looks for it
first, soon (Telegram's probe, in the process that made the attempt; Discord dedupes the
nonce, for a few minutes); an answer's attempt is stored as one that may have arrived
before its request goes out, so a process dying mid-request leaves that for the next one
to respect — and if whether it arrived cannot be found out, the send ends
`unknown` and is never attempted again (a possibly missing message beats a duplicate). An
answer that ends `failed` or `unknown` is reported to the owner, once (the report is stored
in the same transaction that settles the answer). A notice or a report, which nobody could
be told about, is sent again instead when that cannot be found out.

Timing: attempts wait on an injected clock and sleep (`next_at` is stored, so a restart
waits only what is left). Answers: attempts after 10 s, 60 s, 5 min. Notices: at once, then
the same backoff, then every 5 min until delivered or a day old.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from adapters.base import Adapter, Button, OnceSender
from adapters.errors import DeliveryUndecidable, DeliveryUnknown
from agent_core.inbound import ReplyTarget
from bot.storage import Storage
from bot.storage.sends import SendKind, SendRow, SendState

log = logging.getLogger(__name__)

RETRY_DELAYS_S: tuple[float, ...] = (10.0, 60.0, 300.0)
"""Waits before each attempt of an answer's re-send (and between a notice's attempts)."""
NOTICE_LIFETIME = timedelta(days=1)
"""A notice still undelivered after this long is given up (and logged)."""


def new_send(
    key: str, kind: SendKind, target: ReplyTarget, text: str, *, at: datetime, after_s: float = 0.0,
    buttons: Sequence[Button] = (), job_id: str | None = None,
) -> SendRow:
    return SendRow(
        key=key, job_id=job_id, kind=kind, platform=target.platform, chat_id=target.chat_id,
        thread_id=target.thread_id, text=text, buttons=tuple((b.label, b.action) for b in buttons),
        nonce=secrets.token_hex(8), attempts=0, uncertain_since=None, state="pending",
        next_at=at + timedelta(seconds=after_s), reason=None, created_at=at,
    )


@dataclass(frozen=True, slots=True)
class Settled:
    """A send that ended: `state` is sent, failed or unknown; `reason` the last error."""

    send: SendRow
    state: SendState
    reason: str


FollowUp = Callable[[Settled], Awaitable[SendRow | None]]
"""What to send because a send ended (the owner's report), stored with the settlement."""
OnSettled = Callable[[Settled], Awaitable[None]]


class PendingSends:
    """Runs every pending send of this process (see the module docstring)."""

    def __init__(
        self,
        storage: Storage,
        adapters: Callable[[], Mapping[str, Adapter]],
        *,
        clock: Callable[[], datetime],
        follow_up: FollowUp,
        on_settled: OnSettled,
        retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.storage = storage
        self._adapters = adapters
        self.clock = clock
        self._follow_up = follow_up
        self._on_settled = on_settled
        self.retry_delays_s = tuple(retry_delays_s)
        self.sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    async def add(self, send: SendRow) -> bool:
        """Store `send` and start attempting it; False (nothing new) if its key exists."""
        if not await self.storage.add_send(send):
            return False
        self._start(send.key)
        return True

    def started(self, key: str) -> None:
        """Start attempting a send another transaction stored (e.g. with a skipped due time)."""
        self._start(key)

    async def resume(self) -> int:
        """At start-up (adapters connected): resume what the last process left pending."""
        pending = await self.storage.pending_sends()
        for send in pending:
            self._start(send.key)
        if pending:
            log.info("sends.resumed", extra={"sends": len(pending)})
        return len(pending)

    def _start(self, key: str) -> None:
        if self._closed or key in self._tasks:
            return
        task = asyncio.create_task(self._run(key), name=f"send:{key[:40]}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def _run(self, key: str) -> None:
        while True:
            send = await self.storage.get_send(key)
            if send is None or send.state != "pending":
                return
            wait = (send.next_at - self.clock()).total_seconds()
            if wait > 0:
                await self.sleep(wait)
            try:
                if await self._attempt(send):
                    return
            except Exception:  # task boundary: the row stays pending for the next start
                log.exception("send.attempt_crashed", extra={"send": key})
                return

    async def _attempt(self, send: SendRow) -> bool:
        """One attempt; True once the send has ended."""
        adapter = self._adapters().get(send.platform)
        target = ReplyTarget(send.platform, send.chat_id, send.thread_id)
        buttons = [Button(label, action) for label, action in send.buttons]
        try:
            if adapter is None:
                raise RuntimeError(f"{send.platform} is not running")
            if isinstance(adapter, OnceSender):
                since = send.uncertain_since
                # A notice or report has nobody to be reported to: when whether an earlier
                # attempt arrived cannot be found out, it is sent again (a lost notice drops a
                # run silently; a repeated one does not), so it is never passed as uncertain.
                uncertain_for = (
                    None if since is None or send.kind != "answer" else max(0.0, (self.clock() - since).total_seconds())
                )
                if since is None and send.kind == "answer":
                    # Written ahead: a process that dies while this request is out leaves an
                    # answer that may have arrived, which the next one never repeats blindly
                    # (the owner is told).
                    await self.storage.send_attempted(
                        send.key, state="pending", attempts=send.attempts, uncertain_since=self.clock(),
                        next_at=send.next_at, reason=send.reason,
                    )
                await adapter.send_once(target, send.text, send.nonce, buttons=buttons, uncertain_for=uncertain_for)
            else:  # a platform that cannot lose an answer (the console)
                await adapter.send_text(target, send.text, buttons=buttons)
        except Exception as exc:  # the platform's reason, kept for the owner's report
            if isinstance(exc, DeliveryUndecidable) and send.kind == "answer":
                log.warning("send.undecidable", extra={"send": send.key, "error": str(exc)})
                await self._settle(send, "unknown", _reason(exc))
                return True
            since = send.uncertain_since
            if since is None and isinstance(exc, DeliveryUnknown):
                since = self.clock()
            attempts = send.attempts + 1
            log.warning("send.attempt_failed", extra={"send": send.key, "attempt": attempts, "uncertain": bool(since)})
            delay = self._delay(send, attempts)
            if delay is None:
                ended = replace(send, attempts=attempts, uncertain_since=since)
                await self._settle(ended, "failed" if since is None else "unknown", _reason(exc))
                return True
            if isinstance(exc, DeliveryUnknown):
                delay = min(delay, self.retry_delays_s[0])  # look soon, while the platform can still tell
            await self.storage.send_attempted(
                send.key, state="pending", attempts=attempts, uncertain_since=since,
                next_at=self.clock() + timedelta(seconds=delay), reason=_reason(exc),
            )
            return False
        await self._settle(send, "sent", "")
        return True

    def _delay(self, send: SendRow, attempts: int) -> float | None:
        """Seconds before the next attempt after `attempts` failed ones; None: no more."""
        delays = self.retry_delays_s
        if send.kind == "answer":  # its first attempt already waited delays[0]
            return delays[attempts] if attempts < len(delays) else None
        if self.clock() - send.created_at > NOTICE_LIFETIME:
            return None
        return delays[min(attempts - 1, len(delays) - 1)]

    async def _settle(self, send: SendRow, state: SendState, reason: str) -> None:
        settled = Settled(send, state, reason)
        follow = None if state == "sent" else await self._follow_up(settled)
        await self.storage.send_attempted(
            send.key, state=state, attempts=send.attempts, uncertain_since=send.uncertain_since, next_at=send.next_at,
            reason=reason or None, follow_up=follow,
        )
        if follow is not None:
            self._start(follow.key)
        await self._on_settled(settled)

    async def drain(self) -> None:
        """Wait until nothing is pending in this process (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop attempting; pending rows wait for the next start."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
