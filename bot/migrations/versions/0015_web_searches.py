"""Web searches per run (the web search server tool, ROOST_AGENT__WEB_SEARCH), for /usage and
its cost.

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
    # Runs recorded before searches existed made none.
    op.add_column("run_metrics", sa.Column("web_searches", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("run_metrics") as batch:
        batch.drop_column("web_searches")
