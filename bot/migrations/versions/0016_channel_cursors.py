"""Channel cursors: the newest message id taken into the inbox per platform channel, so a
new Discord session fetches what came while Roost was down (bot.storage.cursors).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "channel_cursors",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("channel_id", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("platform", "channel_id"),
    )


def downgrade() -> None:
    op.drop_table("channel_cursors")
