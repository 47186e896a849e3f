"""SQLAlchemy 2 declarative models; private to bot.storage (repositories return records).

The schema is owned by Alembic (`bot/migrations`); these models must match the migrations
exactly, which `tests/test_storage_migrations.py` checks with autogenerate on both dialects.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Stable constraint names, so later migrations can drop/alter them by name on both dialects.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias), not BIGINT.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in, timezone-aware UTC out, on every dialect.

    PostgreSQL stores `timestamptz`. SQLite has no time zones, so values are stored as naive
    UTC text in one format; that keeps string comparison (`expires_at <= :now`) correct.
    Naive datetimes are rejected: guessing their zone is how expiry bugs start.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: storage needs timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


class SessionModel(Base):
    __tablename__ = "sessions"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    scope: Mapped[str] = mapped_column(String(16))
    platform: Mapped[str | None] = mapped_column(String(32))
    chat_id: Mapped[str | None] = mapped_column(String(64))
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    model_override: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    queue_mode: Mapped[str | None] = mapped_column(String(16))
    """Messages while busy (bot.lanes): None = the configured default."""
    voice_replies: Mapped[bool | None] = mapped_column(Boolean)
    """`/voice on`: answers to voice notes also come back spoken (bot.tts)."""


class MessageModel(Base):
    """Transcript rows. No FK to sessions: the core may persist before the bot registers the
    session; the epoch is taken from the session row when there is one, else 0."""

    __tablename__ = "messages"
    __table_args__ = (Index(None, "session_key", "epoch", "id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[list[Any]]
    created_at: Mapped[datetime]


class RunModel(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index(None, "session_key"), Index(None, "status"), Index(None, "account", "started_at"),
        Index(None, "requester", "started_at"),
    )  # fmt: skip

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_key: Mapped[str] = mapped_column(String(255))
    model: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    stop_reason: Mapped[str | None] = mapped_column(String(64))
    turns: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_creation_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    account: Mapped[str | None] = mapped_column(String(255))
    """The chat session whose budget the run counts against (a worker's: its parent's chat;
    an isolated job's: its chat)."""
    requester: Mapped[str | None] = mapped_column(String(255))
    """Identity of the person whose message (or job) started the run: their per-user budget."""


class ToolCallModel(Base):
    """Keyed by our own id (migration 0003): the model's tool_use ids may repeat, within one
    message or across runs."""

    __tablename__ = "tool_calls"
    __table_args__ = (Index(None, "run_id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    call_id: Mapped[str] = mapped_column(String(128))
    # A tool call belongs to a run the core has started; the FK catches out-of-order writes.
    run_id: Mapped[str] = mapped_column(String(64), ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    input: Mapped[dict[str, Any]]
    output: Mapped[str | None] = mapped_column(Text)
    is_error: Mapped[bool | None] = mapped_column(Boolean)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    duration_s: Mapped[float | None] = mapped_column(Float)


class ApprovalModel(Base):
    __tablename__ = "approvals"
    __table_args__ = (Index(None, "state", "expires_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_key: Mapped[str] = mapped_column(String(255))
    run_id: Mapped[str] = mapped_column(String(64))
    call_id: Mapped[str] = mapped_column(String(128))
    tool_name: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(Text)
    requester: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16))
    resolved_by: Mapped[str | None] = mapped_column(String(128))
    resolved_at: Mapped[datetime | None]
    chat_ref: Mapped[str | None] = mapped_column(String(255))


class GrantModel(Base):
    """'Always allow in this session' as a rule: one session, one tool, one exact input
    (migration 0005), bound to the files it names (0013). `input_hash` (SHA-256 of `input`,
    and of `binding` when there is one) keeps the unique key short."""

    __tablename__ = "grants"
    __table_args__ = (UniqueConstraint("session_key", "tool_name", "input_hash"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(255))
    tool_name: Mapped[str] = mapped_column(String(128))
    input_hash: Mapped[str] = mapped_column(String(64))
    input: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    created_by: Mapped[str | None] = mapped_column(String(128))
    binding: Mapped[str] = mapped_column(Text, default="", server_default="")
    """The workspace files the command names and their digests at the grant (0013); "" if none."""


class SeenUpdateModel(Base):
    __tablename__ = "seen_updates"
    __table_args__ = (Index(None, "seen_at"),)

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    update_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    seen_at: Mapped[datetime]


class ChannelCursorModel(Base):
    __tablename__ = "channel_cursors"

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    channel_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    message_id: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime]


class DeliveryModel(Base):
    __tablename__ = "deliveries"
    __table_args__ = (Index(None, "state"),)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    part_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(64))
    thread_id: Mapped[str | None] = mapped_column(String(64))
    message_id: Mapped[str | None] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))
    updated_at: Mapped[datetime]


class PairingRequestModel(Base):
    __tablename__ = "pairing_requests"
    __table_args__ = (UniqueConstraint("platform", "user_id"),)

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    code: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64))
    user_name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class PairedUserModel(Base):
    __tablename__ = "paired_users"

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_name: Mapped[str] = mapped_column(String(255))
    paired_at: Mapped[datetime]


class AllowedGroupModel(Base):
    __tablename__ = "allowed_groups"

    platform: Mapped[str] = mapped_column(String(32), primary_key=True)
    chat_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    added_at: Mapped[datetime]


class GroupMessageModel(Base):
    __tablename__ = "group_messages"
    __table_args__ = (Index(None, "session_key", "id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(255))
    sender: Mapped[str] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime]


class InboxModel(Base):
    """Every accepted message, stored before it is acknowledged: received (not yet routed) →
    queued (waiting for a run) → running (taken by `run_id`) → done."""

    __tablename__ = "inbox"
    __table_args__ = (Index(None, "state", "id"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(32))
    chat_kind: Mapped[str] = mapped_column(String(16))
    chat_id: Mapped[str] = mapped_column(String(64))
    thread_id: Mapped[str | None] = mapped_column(String(64))
    sender_id: Mapped[str] = mapped_column(String(64))
    sender_name: Mapped[str] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)
    mentioned: Mapped[bool] = mapped_column(Boolean)
    message_id: Mapped[str | None] = mapped_column(String(64))
    update_id: Mapped[str | None] = mapped_column(String(128))
    media: Mapped[Any | None] = mapped_column(JSON)
    """Attachment references and album id (agent_core.inbound.Attachment); None for text."""
    session_key: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[str | None] = mapped_column(String(64))
    received_by: Mapped[str | None] = mapped_column(String(64))
    """The replica that stored (or took over) a `received` row (bot.replicas); None in one process."""
    received_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class AuditModel(Base):
    """The audit trail: tool calls and access decisions. Append-only; text already redacted."""

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "at"), Index(None, "session_key", "at"))

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(128))
    session_key: Mapped[str | None] = mapped_column(String(255))
    subject: Mapped[str] = mapped_column(String(255))
    detail: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(String(32))
    approver: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str | None] = mapped_column(String(16))
    size: Mapped[int | None] = mapped_column(Integer)
    duration_s: Mapped[float | None] = mapped_column(Float)


class JobModel(Base):
    """A scheduled job (bot.scheduling): what to run, when next, and how its last run went.
    The schedule is stored as text (kind + spec + zone) and rebuilt into an APScheduler
    trigger, so rows never hold pickles."""

    __tablename__ = "jobs"
    __table_args__ = (Index(None, "state", "next_run_at"), Index(None, "session_key"))

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    prompt: Mapped[str] = mapped_column(Text)
    session_key: Mapped[str] = mapped_column(String(255))
    platform: Mapped[str] = mapped_column(String(32))
    chat_kind: Mapped[str] = mapped_column(String(16))
    chat_id: Mapped[str] = mapped_column(String(64))
    thread_id: Mapped[str | None] = mapped_column(String(64))
    creator: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    spec: Mapped[str] = mapped_column(String(255))
    timezone: Mapped[str] = mapped_column(String(64))
    grace_s: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    next_run_at: Mapped[datetime | None]
    last_run_at: Mapped[datetime | None]
    last_run_id: Mapped[str | None] = mapped_column(String(64))
    last_exec: Mapped[str | None] = mapped_column(String(16))
    last_delivery: Mapped[str | None] = mapped_column(String(16))
    missed_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    isolated: Mapped[bool] = mapped_column(Boolean, server_default=false(), default=False)
    """Runs in a session of its own (bot.session_keys.isolated_key), not the chat's (0011)."""


class PendingSendModel(Base):
    """A scheduled job's send that must survive a restart (bot.scheduling.sends): pending
    until the chat confirms it, with the one nonce every attempt of it carries (0014)."""

    __tablename__ = "pending_sends"
    __table_args__ = (Index(None, "state"), Index(None, "job_id"))

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str | None] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))
    platform: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(64))
    thread_id: Mapped[str | None] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    buttons: Mapped[list[Any]]
    nonce: Mapped[str] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer)
    uncertain_since: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(16))
    next_at: Mapped[datetime]
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class RunMetricsModel(Base):
    """One row per finished run (bot.run_metrics): what /usage and `roost status` add up."""

    __tablename__ = "run_metrics"
    __table_args__ = (Index(None, "started_at"), Index(None, "session_key", "started_at"))

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_key: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime]
    duration_s: Mapped[float] = mapped_column(Float)
    first_token_s: Mapped[float | None] = mapped_column(Float)
    turns: Mapped[int] = mapped_column(Integer)
    tool_calls: Mapped[int] = mapped_column(Integer)
    tool_errors: Mapped[int] = mapped_column(Integer)
    tool_seconds: Mapped[float] = mapped_column(Float)
    errors: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    fallbacks: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    web_searches: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class NoticeSentModel(Base):
    """A notice that must reach a chat once only (a resume offer, an anomaly), recorded
    before it is sent."""

    __tablename__ = "notices_sent"

    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    ref: Mapped[str] = mapped_column(String(128), primary_key=True)
    sent_at: Mapped[datetime]


class PlanModel(Base):
    """A session's plan (agent_core.plans): steps with done_when and evidence, the current
    step, consecutive unsupported advances."""

    __tablename__ = "plans"
    __table_args__ = (Index(None, "session_key", "state"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_key: Mapped[str] = mapped_column(String(255))
    run_id: Mapped[str] = mapped_column(String(64))
    steps: Mapped[list[Any]]
    current: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    corrections: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class GoalLockModel(Base):
    """The goal and constraints pinned into every request of a session."""

    __tablename__ = "goal_locks"

    session_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    goal: Mapped[str] = mapped_column(Text)
    constraints: Mapped[list[Any]]
    reason: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime]


class QuestionModel(Base):
    """An ask_user question: the run waits on it; the addressee's answer resumes the run (after
    a restart, as the pending tool_use's result)."""

    __tablename__ = "questions"
    __table_args__ = (Index(None, "session_key", "state"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_key: Mapped[str] = mapped_column(String(255))
    run_id: Mapped[str] = mapped_column(String(64))
    call_id: Mapped[str] = mapped_column(String(128))
    addressee: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    options: Mapped[list[Any]]
    state: Mapped[str] = mapped_column(String(16))
    answer: Mapped[str | None] = mapped_column(Text)
    answered_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime]
    answered_at: Mapped[datetime | None]


class WorkerRunModel(Base):
    """A worker spawned by a run (agent_core.workers); its own run is a `runs` row with the
    same id."""

    __tablename__ = "worker_runs"
    __table_args__ = (Index(None, "parent_run_id"), Index(None, "status"))

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    parent_run_id: Mapped[str] = mapped_column(String(64))
    session_key: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(128))
    task: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    result: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]


class CompactionModel(Base):
    """A context compaction (agent_core.compaction): `summary` replaces the first `covered`
    messages of the session's `epoch` in what is sent; the messages themselves stay stored.
    A failed attempt (ok false) is kept so one threshold crossing is tried once."""

    __tablename__ = "compactions"
    __table_args__ = (Index(None, "session_key", "epoch"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer)
    covered: Mapped[int] = mapped_column(Integer)
    covered_message_id: Mapped[int | None] = mapped_column(BigInteger)
    ok: Mapped[bool] = mapped_column(Boolean)
    forced: Mapped[bool] = mapped_column(Boolean)
    summary: Mapped[str] = mapped_column(Text)
    error: Mapped[str] = mapped_column(Text)
    tokens_before: Mapped[int] = mapped_column(Integer)
    tokens_after: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]


class AdmittedMessageModel(Base):
    """A message counted against a rate-limit bucket ("telegram:42", "group:telegram:-100…")
    when admitted, so replicas share one window per bucket (bot.storage.limits). Rows older
    than the window are deleted as the bucket's next message is admitted."""

    __tablename__ = "admitted_messages"
    __table_args__ = (Index(None, "bucket", "at"),)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    bucket: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime]


class LimitNoticeModel(Base):
    """Until when a bucket's refusal by one limit has been told (told once per window, by
    whichever replica refused first)."""

    __tablename__ = "limit_notices"

    bucket: Mapped[str] = mapped_column(String(255), primary_key=True)
    limit_name: Mapped[str] = mapped_column(String(32), primary_key=True)
    told_until: Mapped[datetime]


class ModelBreakerModel(Base):
    """A model's circuit breaker as every replica sees it (agent_core.breaker): times are
    epoch seconds of the replicas' wall clocks; `prober` holds the one probe until
    `probe_until`."""

    __tablename__ = "model_breakers"

    model: Mapped[str] = mapped_column(String(255), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    failures: Mapped[int] = mapped_column(Integer)
    opened_at: Mapped[float] = mapped_column(Float)
    last_error: Mapped[str] = mapped_column(Text)
    prober: Mapped[str | None] = mapped_column(String(64))
    probe_until: Mapped[float | None] = mapped_column(Float)
