"""Grant rules bound to the workspace files their command names: `binding` holds those
files' paths and content digests at the grant (agent_core.grant_binding); "" for a rule
that names none. Existing rules keep "" and so still hold only for commands naming no
workspace file (a lookup for one naming files carries a binding and does not match them).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("grants", sa.Column("binding", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("grants") as batch:
        batch.drop_column("binding")
