"""Isolated scheduled jobs: a job may run in a session of its own (no chat history) instead
of its chat's session (bot.scheduling; `schedule` tool's `isolated`).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing jobs keep running in their chat's session.
    op.add_column("jobs", sa.Column("isolated", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("isolated")
