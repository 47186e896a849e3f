"""The inbox: every accepted message is stored before it is acknowledged, and replayed after a crash.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models (a migration is a frozen record).
_TS = sa.DateTime(timezone=True)
_BIGINT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", _BIGINT_PK, autoincrement=True, nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_kind", sa.String(16), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("sender_id", sa.String(64), nullable=False),
        sa.Column("sender_name", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("mentioned", sa.Boolean(), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("update_id", sa.String(128), nullable=True),
        sa.Column("session_key", sa.String(255), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("received_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_inbox"),
    )
    op.create_index("ix_inbox_state_id", "inbox", ["state", "id"])


def downgrade() -> None:
    op.drop_index("ix_inbox_state_id", table_name="inbox")
    op.drop_table("inbox")
