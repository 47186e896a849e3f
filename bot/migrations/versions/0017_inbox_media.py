"""Attachments of inbound messages (photos, files, voice notes): their platform references
live in the inbox row, so a message accepted before a crash is fetched and answered once
after it, media included. And each session's `/voice on|off` choice.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("media", sa.JSON(), nullable=True))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("voice_replies", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("voice_replies")
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("media")
