"""Scheduled jobs' sends that must survive a restart: an answer waiting to be re-sent, a
missed-run notice, a report to the owner — each pending until the chat confirms it
(bot.scheduling.sends).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pending_sends",
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("job_id", sa.String(16), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("buttons", sa.JSON(), nullable=False),
        sa.Column("nonce", sa.String(32), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("uncertain_since", _TS, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_at", _TS, nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_pending_sends"),
    )
    op.create_index("ix_pending_sends_state", "pending_sends", ["state"])
    op.create_index("ix_pending_sends_job_id", "pending_sends", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_pending_sends_job_id", table_name="pending_sends")
    op.drop_index("ix_pending_sends_state", table_name="pending_sends")
    op.drop_table("pending_sends")
