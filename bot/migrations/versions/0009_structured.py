"""Structured execution: plans (steps with done_when and evidence), goal locks (one per
session), ask_user questions, and worker runs.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models (a migration is a frozen record).
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("current", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("corrections", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_plans"),
    )
    op.create_index("ix_plans_session_key_state", "plans", ["session_key", "state"])
    op.create_table(
        "goal_locks",
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("constraints", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("session_key", name="pk_goal_locks"),
    )
    op.create_table(
        "questions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("addressee", sa.String(128), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(128), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("answered_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_questions"),
    )
    op.create_index("ix_questions_session_key_state", "questions", ["session_key", "state"])
    op.create_table(
        "worker_runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("parent_run_id", sa.String(64), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_worker_runs"),
    )
    op.create_index("ix_worker_runs_parent_run_id", "worker_runs", ["parent_run_id"])
    op.create_index("ix_worker_runs_status", "worker_runs", ["status"])


def downgrade() -> None:
    op.drop_index("ix_worker_runs_status", table_name="worker_runs")
    op.drop_index("ix_worker_runs_parent_run_id", table_name="worker_runs")
    op.drop_table("worker_runs")
    op.drop_index("ix_questions_session_key_state", table_name="questions")
    op.drop_table("questions")
    op.drop_table("goal_locks")
    op.drop_index("ix_plans_session_key_state", table_name="plans")
    op.drop_table("plans")
