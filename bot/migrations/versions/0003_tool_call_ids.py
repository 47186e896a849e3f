"""Tool calls keyed by our own id, so storage never depends on the model's tool_use ids being unique.

`tool_calls.call_id` was the primary key: a model that repeats an id within one message, or an
Anthropic-compatible endpoint that numbers ids per response ("toolu_1" in every run), hit it.
Now `id` (auto-increment) is the key and `call_id` is a plain column; the run_id index stays.

The table is rebuilt (SQLite cannot change a primary key in place): old names are freed first
(index names are global on both dialects, and on PostgreSQL so is the primary key's index),
rows are copied in their start order.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_BIGINT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_OLD = "tool_calls_before_0003"
_COLUMNS = "call_id, run_id, name, input, output, is_error, started_at, finished_at, duration_s"


def _columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("input", sa.JSON(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=True),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
    ]


def _fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["run_id"], ["runs.id"], name="fk_tool_calls_run_id_runs", ondelete="CASCADE"
    )


def _set_aside() -> None:
    op.drop_index("ix_tool_calls_run_id", table_name="tool_calls")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("pk_tool_calls", "tool_calls", type_="primary")
        op.drop_constraint("fk_tool_calls_run_id_runs", "tool_calls", type_="foreignkey")
    op.rename_table("tool_calls", _OLD)


def upgrade() -> None:
    _set_aside()
    op.create_table(
        "tool_calls",
        sa.Column("id", _BIGINT_PK, autoincrement=True, nullable=False),
        *_columns(),
        _fk(),
        sa.PrimaryKeyConstraint("id", name="pk_tool_calls"),
    )
    op.create_index("ix_tool_calls_run_id", "tool_calls", ["run_id"])
    op.execute(
        f"INSERT INTO tool_calls ({_COLUMNS}) SELECT {_COLUMNS} FROM {_OLD} ORDER BY started_at, call_id"
    )
    op.drop_table(_OLD)


def downgrade() -> None:
    _set_aside()
    op.create_table(
        "tool_calls", *_columns(), _fk(), sa.PrimaryKeyConstraint("call_id", name="pk_tool_calls")
    )
    op.create_index("ix_tool_calls_run_id", "tool_calls", ["run_id"])
    # call_id becomes the key again: of repeated ids only the first recorded row survives.
    op.execute(
        f"INSERT INTO tool_calls ({_COLUMNS}) SELECT {_COLUMNS} FROM {_OLD} "
        f"WHERE id IN (SELECT MIN(id) FROM {_OLD} GROUP BY call_id)"
    )
    op.drop_table(_OLD)
