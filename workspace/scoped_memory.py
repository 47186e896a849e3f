"""`ScopedMemory`: one session's view of memory, implementing `agent_core.tools.MemoryBackend`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from workspace.access import check_session
from workspace.daily_log import append_entry
from workspace.memory_index import MemoryIndex


def _local_now() -> datetime:
    return datetime.now().astimezone()


class ScopedMemory:
    """Search and log writing confined to one session.

    `search` sees only what the scope may (main: MEMORY.md + main logs; sub: its own logs)
    and refreshes the index first, so edits are found without a restart. `append_log`
    writes to this session's log of today and nothing else.
    """

    def __init__(
        self,
        index: MemoryIndex,
        root: Path,
        session_key: str,
        scope: str,
        *,
        now: Callable[[], datetime] = _local_now,
    ) -> None:
        check_session(session_key, scope)
        self._index = index
        self._root = root
        self.session_key = session_key
        self.scope = scope
        self._now = now

    async def search(self, query: str, limit: int = 8) -> list[dict[str, Any]]:
        """Hits as dicts: path, start_line, end_line, snippet, score (best first)."""
        await self._index.refresh()
        hits = await self._index.search(query, self.session_key, self.scope, limit=limit)
        return [hit.as_dict() for hit in hits]

    async def append_log(self, text: str) -> Path:
        """Append a timestamped entry to this session's log of today; returns its path."""
        path = await asyncio.to_thread(append_entry, self._root, self.session_key, self._now(), text)
        self._index.mark_dirty()
        return path
