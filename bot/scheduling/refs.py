"""How a fired job is recognised along the message path: its inbox row's update id."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

PREFIX = "job:"
HEARTBEAT = "heartbeat"


@dataclass(frozen=True, slots=True)
class JobRef:
    """The run of job `job_id` for the due time `due` (the heartbeat's id is "heartbeat")."""

    job_id: str
    due: datetime

    @property
    def update_id(self) -> str:
        return f"{PREFIX}{self.job_id}:{int(self.due.timestamp())}"

    @property
    def heartbeat(self) -> bool:
        return self.job_id == HEARTBEAT


def job_ref(update_id: str | None) -> JobRef | None:
    """The job behind an inbox row's update id; None for an ordinary message."""
    if not update_id or not update_id.startswith(PREFIX):
        return None
    job_id, _, epoch = update_id[len(PREFIX) :].rpartition(":")
    if not job_id or not epoch.isdigit():
        return None
    return JobRef(job_id, datetime.fromtimestamp(int(epoch), UTC))
