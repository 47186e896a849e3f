"""Memory index: memory_files, memory_chunks and full-text search (FTS5 or tsvector + GIN).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from workspace.memory_schema import drop_statements, schema_statements

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Raw SQL from workspace.memory_schema (the single source of this DDL): SQLite gets an
    # FTS5 external-content table with triggers, PostgreSQL a generated tsvector + GIN index.
    for statement in schema_statements(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in drop_statements(op.get_bind().dialect.name):
        op.execute(statement)
