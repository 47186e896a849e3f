"""Who a run's spend counts against: `account` (the chat session charged: a worker's parent
chat, an isolated job's chat) and `requester` (the person who asked), so the daily budget
and runs per hour count workers, jobs and a user's runs in every chat (bot.ratelimits).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("account", sa.String(255), nullable=True))
    op.add_column("runs", sa.Column("requester", sa.String(255), nullable=True))
    # Today's budget keeps counting the runs made before the upgrade: a worker's against its
    # parent's chat, any other against its own session; a paired user's DM runs are theirs.
    op.execute(
        "UPDATE runs SET account = COALESCE("
        "(SELECT w.session_key FROM worker_runs w WHERE w.id = runs.id), session_key)"
    )
    op.execute(sa.text(
        "UPDATE runs SET requester = substr(session_key, 4) "
        r"WHERE session_key LIKE 'dm:%' AND session_key NOT LIKE '%\:job-%'"  # \: is a colon, not a bind
    ))  # fmt: skip
    op.create_index("ix_runs_account_started_at", "runs", ["account", "started_at"])
    op.create_index("ix_runs_requester_started_at", "runs", ["requester", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_requester_started_at", table_name="runs")
    op.drop_index("ix_runs_account_started_at", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("requester")
        batch.drop_column("account")
