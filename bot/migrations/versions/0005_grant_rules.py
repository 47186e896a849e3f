"""Grants become rules scoped to session + tool + the exact normalised input.

The old table held one row per (session, tool name) and covered any later input: that is
the hole this closes, so its rows are dropped rather than widened into rules (nobody knows
which input they were meant for). The new table has an integer id to list and revoke by.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Written out rather than imported from bot.storage.models: a migration is a frozen record.
_TS = sa.DateTime(timezone=True)
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER only

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table("grants")
    op.create_table(
        "grants",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("input_hash", sa.String(64), nullable=False),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_grants"),
        sa.UniqueConstraint(
            "session_key", "tool_name", "input_hash", name="uq_grants_session_key_tool_name_input_hash"
        ),
    )


def downgrade() -> None:
    op.drop_table("grants")
    op.create_table(
        "grants",
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("session_key", "tool_name", name="pk_grants"),
    )
