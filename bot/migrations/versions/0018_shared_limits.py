"""Shared limits for replicas on one PostgreSQL: the messages each user and group had
admitted in the last minute, who was told of a refusal in the current window, and each
model's circuit breaker (bot.storage.limits).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "admitted_messages",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("bucket", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_admitted_messages"),
    )
    op.create_index("ix_admitted_messages_bucket_at", "admitted_messages", ["bucket", "at"])
    op.create_table(
        "limit_notices",
        sa.Column("bucket", sa.String(255), nullable=False),
        sa.Column("limit_name", sa.String(32), nullable=False),
        sa.Column("told_until", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("bucket", "limit_name", name="pk_limit_notices"),
    )
    op.create_table(
        "model_breakers",
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("prober", sa.String(64), nullable=True),
        sa.Column("probe_until", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("model", name="pk_model_breakers"),
    )


def downgrade() -> None:
    op.drop_table("model_breakers")
    op.drop_table("limit_notices")
    op.drop_index("ix_admitted_messages_bucket_at", table_name="admitted_messages")
    op.drop_table("admitted_messages")
