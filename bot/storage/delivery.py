"""Inbound de-duplication (platform update ids) and outbound deliveries of streamed replies."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, select

from bot.storage.base import RepositoryBase, rowcount
from bot.storage.models import DeliveryModel, SeenUpdateModel
from bot.storage.records import DeliveryRow, DeliveryState


def _delivery_row(m: DeliveryModel) -> DeliveryRow:
    return DeliveryRow(
        run_id=m.run_id,
        part_index=m.part_index,
        platform=m.platform,
        chat_id=m.chat_id,
        thread_id=m.thread_id,
        message_id=m.message_id,
        text=m.text,
        state=m.state,  # type: ignore[arg-type]  # only ever written from DeliveryState
        updated_at=m.updated_at,
    )


class DeliveryRepository(RepositoryBase):
    async def mark_update_seen(self, platform: str, update_id: str) -> bool:
        """True the first time (platform, update_id) is seen, False ever after (until pruned).
        Atomic across processes: INSERT ... ON CONFLICT DO NOTHING, decided by rowcount."""
        async with self._tx() as s:
            result = await s.execute(
                self._insert(SeenUpdateModel)
                .values(platform=platform, update_id=update_id, seen_at=self._now())
                .on_conflict_do_nothing(index_elements=["platform", "update_id"])
            )
            return rowcount(result) == 1

    async def prune_seen_updates(self, older_than: timedelta = timedelta(days=7)) -> int:
        """Forget update ids seen before now - older_than; returns how many were removed.
        Platforms do not redeliver updates that old, so the table stays small."""
        cutoff = self._now() - older_than
        async with self._tx() as s:
            result = await s.execute(
                delete(SeenUpdateModel)
                .where(SeenUpdateModel.seen_at < cutoff)
                .execution_options(synchronize_session=False)
            )
            return rowcount(result)

    async def record_delivery(
        self,
        run_id: str,
        part_index: int,
        *,
        platform: str,
        chat_id: str,
        text: str,
        state: DeliveryState,
        message_id: str | None = None,
        thread_id: str | None = None,
    ) -> DeliveryRow:
        """Insert or update the delivery (run_id, part_index) to what the platform now shows.
        Call after each successful send/edit, so `text` never runs ahead of the chat."""
        values = {
            "platform": platform,
            "chat_id": chat_id,
            "thread_id": thread_id,
            "message_id": message_id,
            "text": text,
            "state": state,
            "updated_at": self._now(),
        }
        stmt = self._insert(DeliveryModel).values(run_id=run_id, part_index=part_index, **values)
        stmt = stmt.on_conflict_do_update(index_elements=["run_id", "part_index"], set_=values)
        async with self._tx() as s:
            await s.execute(stmt)
            row = await s.get_one(DeliveryModel, (run_id, part_index), populate_existing=True)
            return _delivery_row(row)

    async def deliveries_for_run(self, run_id: str) -> list[DeliveryRow]:
        async with self._tx() as s:
            rows = await s.scalars(
                select(DeliveryModel)
                .where(DeliveryModel.run_id == run_id)
                .order_by(DeliveryModel.part_index)
            )
            return [_delivery_row(m) for m in rows]

    async def unfinished_deliveries(self) -> list[DeliveryRow]:
        """Deliveries still `streaming` (a restart cut them off): finish or mark them."""
        async with self._tx() as s:
            rows = await s.scalars(
                select(DeliveryModel)
                .where(DeliveryModel.state == "streaming")
                .order_by(DeliveryModel.updated_at, DeliveryModel.run_id, DeliveryModel.part_index)
            )
            return [_delivery_row(m) for m in rows]
