"""The start-once lifecycle every platform adapter shares."""

from __future__ import annotations

from typing import Literal

from adapters.base import InboundHandler

AdapterState = Literal["new", "running", "closed"]


class StartsOnce:
    """`start()` runs once; a start that fails closes whatever it had opened before the error
    propagates. Subclasses set `self._state = "new"` and implement `_start` and `aclose`."""

    _state: AdapterState

    async def start(self, handler: InboundHandler) -> None:
        if self._state != "new":
            raise RuntimeError(f"{type(self).__name__} cannot start: it is {self._state}")
        self._state = "running"
        try:
            await self._start(handler)
        except BaseException:
            await self.aclose()
            raise

    async def _start(self, handler: InboundHandler) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError
