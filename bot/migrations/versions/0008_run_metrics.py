"""Run metrics (one row per run: timings, tool calls, tokens, model, fallbacks, estimated
cost), notices sent once (resume offers, anomalies), and a per-session queue mode.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models (a migration is a frozen record).
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_metrics",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("first_token_s", sa.Float(), nullable=True),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("tool_errors", sa.Integer(), nullable=False),
        sa.Column("tool_seconds", sa.Float(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("fallbacks", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_metrics"),
    )
    op.create_index("ix_run_metrics_started_at", "run_metrics", ["started_at"])
    op.create_index("ix_run_metrics_session_key_started_at", "run_metrics", ["session_key", "started_at"])
    op.create_table(
        "notices_sent",
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("ref", sa.String(128), nullable=False),
        sa.Column("sent_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("kind", "ref", name="pk_notices_sent"),
    )
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("queue_mode", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("queue_mode")
    op.drop_table("notices_sent")
    op.drop_index("ix_run_metrics_session_key_started_at", table_name="run_metrics")
    op.drop_index("ix_run_metrics_started_at", table_name="run_metrics")
    op.drop_table("run_metrics")
