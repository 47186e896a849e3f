"""A platform adapter for core-path tests: implements our `Adapter` protocol and records what
it was asked to show. It replaces no library: it is a second implementation of our own port."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from adapters.base import InboundHandler
from agent_core.events import Event, RunFailed, RunFinished, TextDelta
from agent_core.inbound import Inbound, ReplyTarget


@dataclass
class RecordedReply:
    target: ReplyTarget
    events: list[Event] = field(default_factory=list)
    closed: bool = False
    cancelled: bool = False

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))

    @property
    def outcome(self) -> RunFinished | RunFailed | None:
        ends = [e for e in self.events if isinstance(e, (RunFinished, RunFailed))]
        return ends[-1] if ends else None


class _Reply:
    def __init__(self, adapter: RecordingAdapter, record: RecordedReply) -> None:
        self._adapter = adapter
        self._record = record

    async def handle(self, event: Event) -> None:
        self._record.events.append(event)
        await self._adapter._changed(event)

    async def aclose(self, *, cancelled: bool = False) -> None:
        self._record.closed = True
        self._record.cancelled = cancelled
        await self._adapter._changed(None)


class RecordingAdapter:
    def __init__(self, platform: str = "telegram") -> None:
        self.platform = platform
        self.handler: InboundHandler | None = None
        self.replies: list[RecordedReply] = []
        self.notices: list[tuple[ReplyTarget, str]] = []
        self._condition = asyncio.Condition()
        self.on_event = None

    async def start(self, handler: InboundHandler) -> None:
        self.handler = handler

    async def aclose(self) -> None:
        pass

    def open_reply(self, target: ReplyTarget) -> _Reply:
        record = RecordedReply(target)
        self.replies.append(record)
        return _Reply(self, record)

    async def close_expired_card(self, record) -> None:  # noqa: ANN001
        self.notices.append((ReplyTarget(self.platform, record.chat_ref or ""), f"card-expired:{record.id}:{record.state}"))

    async def mark_interrupted(self, delivery) -> None:  # noqa: ANN001
        self.notices.append((ReplyTarget(self.platform, delivery.chat_id), f"interrupted:{delivery.message_id}"))

    async def send_text(self, target: ReplyTarget, text: str, *, buttons=()) -> str:  # noqa: ANN001
        self.notices.append((target, text))
        await self._changed(None)
        return str(len(self.notices))

    async def say(self, inbound: Inbound) -> None:
        assert self.handler is not None
        await self.handler.receive(inbound)

    async def _changed(self, event: Event | None) -> None:
        if self.on_event is not None and event is not None:
            await self.on_event(event)
        async with self._condition:
            self._condition.notify_all()

    async def wait_for(self, predicate, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            async with self._condition:
                await self._condition.wait_for(predicate)

    def closed_replies(self) -> list[RecordedReply]:
        return [r for r in self.replies if r.closed]


def private(
    user: int | str, text: str, *, platform: str = "telegram", update_id: str | None = None
) -> Inbound:
    return Inbound(
        platform, "private", str(user), str(user), f"user{user}", text, update_id=update_id
    )


def group(
    chat: int | str,
    user: int | str,
    text: str,
    *,
    mentioned: bool = True,
    thread: str | None = None,
    platform: str = "telegram",
) -> Inbound:
    return Inbound(
        platform,
        "group",
        str(chat),
        str(user),
        f"user{user}",
        text,
        thread_id=thread,
        mentioned=mentioned,
    )
