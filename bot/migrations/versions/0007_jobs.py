"""Scheduled jobs: one row per job, its schedule as text (kind, spec, zone), next and last
run, and the last run's execution and delivery status kept apart.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models (a migration is a frozen record).
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_kind", sa.String(16), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("creator", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("spec", sa.String(255), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("grace_s", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_run_at", _TS, nullable=True),
        sa.Column("last_run_at", _TS, nullable=True),
        sa.Column("last_run_id", sa.String(64), nullable=True),
        sa.Column("last_exec", sa.String(16), nullable=True),
        sa.Column("last_delivery", sa.String(16), nullable=True),
        sa.Column("missed_at", _TS, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_state_next_run_at", "jobs", ["state", "next_run_at"])
    op.create_index("ix_jobs_session_key", "jobs", ["session_key"])


def downgrade() -> None:
    op.drop_index("ix_jobs_session_key", table_name="jobs")
    op.drop_index("ix_jobs_state_next_run_at", table_name="jobs")
    op.drop_table("jobs")
