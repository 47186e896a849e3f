"""Web searches per run: the API's web search server tool is billed per search, so /usage
counts them (bot.run_metrics; agent_core.server_tools).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Runs recorded before web search existed made none.
    op.add_column("run_metrics", sa.Column("web_searches", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("run_metrics") as batch:
        batch.drop_column("web_searches")
