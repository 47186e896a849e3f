"""Initial schema: sessions, transcript, runs, tool calls, approvals, grants, inbound de-dup,
deliveries, pairing, allowed groups, group context buffer.

Revision ID: 0001
Revises:
Create Date: 2026-05-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out rather than imported from bot.storage.models: a migration is a frozen record
# of the schema at that revision and must not change when the models do.
_TS = sa.DateTime(timezone=True)
_BIGINT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("platform", sa.String(32), nullable=True),
        sa.Column("chat_id", sa.String(64), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("model_override", sa.String(255), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_sessions"),
    )
    op.create_table(
        "messages",
        sa.Column("id", _BIGINT_PK, autoincrement=True, nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
    )
    op.create_index("ix_messages_session_key_epoch_id", "messages", ["session_key", "epoch", "id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.String(64), nullable=True),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_creation_tokens", sa.BigInteger(), nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_session_key", "runs", ["session_key"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "tool_calls",
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("input", sa.JSON(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=True),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_tool_calls_run_id_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("call_id", name="pk_tool_calls"),
    )
    op.create_index("ix_tool_calls_run_id", "tool_calls", ["run_id"])
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("requester", sa.String(128), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("resolved_by", sa.String(128), nullable=True),
        sa.Column("resolved_at", _TS, nullable=True),
        sa.Column("chat_ref", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_approvals"),
    )
    op.create_index("ix_approvals_state_expires_at", "approvals", ["state", "expires_at"])
    op.create_table(
        "grants",
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("session_key", "tool_name", name="pk_grants"),
    )
    op.create_table(
        "seen_updates",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("update_id", sa.String(128), nullable=False),
        sa.Column("seen_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("platform", "update_id", name="pk_seen_updates"),
    )
    op.create_index("ix_seen_updates_seen_at", "seen_updates", ["seen_at"])
    op.create_table(
        "deliveries",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("part_index", sa.Integer(), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "part_index", name="pk_deliveries"),
    )
    op.create_index("ix_deliveries_state", "deliveries", ["state"])
    op.create_table(
        "pairing_requests",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("code", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("platform", "code", name="pk_pairing_requests"),
        sa.UniqueConstraint("platform", "user_id", name="uq_pairing_requests_platform_user_id"),
    )
    op.create_table(
        "paired_users",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("paired_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("platform", "user_id", name="pk_paired_users"),
    )
    op.create_table(
        "allowed_groups",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.String(64), nullable=False),
        sa.Column("added_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("platform", "chat_id", name="pk_allowed_groups"),
    )
    op.create_table(
        "group_messages",
        sa.Column("id", _BIGINT_PK, autoincrement=True, nullable=False),
        sa.Column("session_key", sa.String(255), nullable=False),
        sa.Column("sender", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_group_messages"),
    )
    op.create_index("ix_group_messages_session_key_id", "group_messages", ["session_key", "id"])


def downgrade() -> None:
    op.drop_index("ix_group_messages_session_key_id", table_name="group_messages")
    op.drop_table("group_messages")
    op.drop_table("allowed_groups")
    op.drop_table("paired_users")
    op.drop_table("pairing_requests")
    op.drop_index("ix_deliveries_state", table_name="deliveries")
    op.drop_table("deliveries")
    op.drop_index("ix_seen_updates_seen_at", table_name="seen_updates")
    op.drop_table("seen_updates")
    op.drop_table("grants")
    op.drop_index("ix_approvals_state_expires_at", table_name="approvals")
    op.drop_table("approvals")
    op.drop_index("ix_tool_calls_run_id", table_name="tool_calls")
    op.drop_table("tool_calls")
    op.drop_index("ix_runs_status", table_name="runs")
    op.drop_index("ix_runs_session_key", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_messages_session_key_epoch_id", table_name="messages")
    op.drop_table("messages")
    op.drop_table("sessions")
