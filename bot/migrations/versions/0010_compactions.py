"""Context compaction records: the summary that replaces a session's older turns in what is
sent (agent_core.compaction), and failed attempts (so one threshold crossing is tried once).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models (a migration is a frozen record).
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "compactions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False, autoincrement=True),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("covered_message_id", sa.BigInteger(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("tokens_before", sa.Integer(), nullable=False),
        sa.Column("tokens_after", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compactions"),
    )
    op.create_index("ix_compactions_session_key_epoch", "compactions", ["session_key", "epoch"])


def downgrade() -> None:
    op.drop_index("ix_compactions_session_key_epoch", table_name="compactions")
    op.drop_table("compactions")
