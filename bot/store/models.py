"""SQLModel tables. Alembic owns the schema (migrations/); these are its source.

Conventions: integer surrogate keys, aware UTC datetimes (`UTCDateTime`), no
thread id is stored as "" so unique constraints work on every database.

Over 500 lines: the schema is one concept, and Alembic's autogenerate check
compares it against the migrations as a whole; a table per module would only
scatter it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, LargeBinary, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from bot.store.columns import UTCDateTime
from bot.types import utcnow

# Named constraints, so later migrations can alter them (SQLite batch mode needs names).
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _ts(*, index: bool = False) -> Any:
    return Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False, index=index)


def _ts_optional() -> Any:
    return Field(default=None, sa_type=UTCDateTime, nullable=True)


class User(SQLModel, table=True):
    __tablename__ = "users"

    id: int | None = Field(default=None, primary_key=True)
    display_name: str | None = Field(default=None, max_length=200)
    role: str = Field(default="guest", max_length=16)
    created_at: datetime = _ts()
    updated_at: datetime = _ts()


class PlatformLink(SQLModel, table=True):
    """One platform account of a user (`console:bob`, `telegram:4242`, ...)."""

    __tablename__ = "platform_links"
    __table_args__ = (UniqueConstraint("platform", "platform_user_id"),)

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    platform: str = Field(max_length=32)
    platform_user_id: str = Field(max_length=128)
    username: str | None = Field(default=None, max_length=200, index=True)
    display_name: str | None = Field(default=None, max_length=200)
    created_at: datetime = _ts()


class Budget(SQLModel, table=True):
    """A user's token budget for the current period (a UTC month, "YYYY-MM").

    `used` never exceeds the allowance; what a run spent beyond it goes to
    `overage`. LLM calls in flight hold tokens in `budget_holds` (one row
    each), so concurrent calls cannot together spend past the allowance. The
    allowance is the role default from config unless `limit_mode` is "fixed"
    (`limit_tokens`) or "unlimited"; `granted` is a one-off top-up for this
    period."""

    __tablename__ = "budgets"

    user_id: int = Field(foreign_key="users.id", primary_key=True)
    period: str = Field(max_length=7)
    used: int = Field(default=0, sa_type=BigInteger)
    overage: int = Field(default=0, sa_type=BigInteger)
    granted: int = Field(default=0, sa_type=BigInteger)
    limit_mode: str = Field(default="role", max_length=16)
    limit_tokens: int | None = Field(default=None, sa_type=BigInteger)
    awaited_until: datetime | None = _ts_optional()
    """Until then a message of this user waits for their holds to be released
    (`bot.accounts.holds`): a settlement tells the other instances."""
    updated_at: datetime = _ts()


class BudgetHold(SQLModel, table=True):
    """Tokens held for one LLM call in flight, by the run making it on one
    instance: what the user may still spend is the allowance less `used` and
    the live holds. Released with the call's settlement (or the run's turn);
    when the instance dies, by the recovery that takes its run over;
    `expires_at` is a backstop only (past it, the hold counts for nothing),
    never extended."""

    __tablename__ = "budget_holds"

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    run_id: str = Field(max_length=32, index=True)
    instance: str = Field(max_length=120)
    conversation_key: str = Field(max_length=400)
    tokens: int = Field(sa_type=BigInteger)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    created_at: datetime = _ts()


class Persona(SQLModel, table=True):
    __tablename__ = "personas"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, unique=True)
    platform: str | None = Field(default=None, max_length=32)
    server_id: str | None = Field(default=None, max_length=128)
    is_default: bool = False
    model: str | None = Field(default=None, max_length=100)
    max_tokens: int | None = None
    tool_modules: list[str] | None = Field(default=None, sa_type=JSON)
    prompt: str = Field(sa_type=Text)
    source_path: str = Field(max_length=500)
    content_hash: str = Field(max_length=64)
    active: bool = True
    updated_at: datetime = _ts()


class Conversation(SQLModel, table=True):
    __tablename__ = "conversations"

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(max_length=400, unique=True)
    platform: str = Field(max_length=32)
    channel_id: str = Field(max_length=128)
    thread_id: str = Field(default="", max_length=128)
    server_id: str | None = Field(default=None, max_length=128)
    persona_name: str | None = Field(default=None, max_length=100)
    """A persona chosen for this channel (overrides the cascade)."""
    history_start_id: int | None = None
    """Messages with a smaller id are not sent to the LLM (`/new`)."""
    created_at: datetime = _ts()


class Message(SQLModel, table=True):
    """One entry of a conversation: roles user, assistant, tool_call, tool_result."""

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_conversation_id_id", "conversation_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: int = Field(foreign_key="conversations.id")
    run_id: str | None = Field(default=None, max_length=32, index=True)
    role: str = Field(max_length=16)
    text: str = Field(default="", sa_type=Text)
    user_id: int | None = Field(default=None, foreign_key="users.id")
    platform_message_id: str | None = Field(default=None, max_length=128)
    tool_use_id: str | None = Field(default=None, max_length=128)
    tool_name: str | None = Field(default=None, max_length=128)
    data: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    """tool_call: the input; user: attachment metadata."""
    is_error: bool = False
    silent: bool = False
    created_at: datetime = _ts()


class StoredFile(SQLModel, table=True):
    """An attachment a user sent, kept with the message it came with."""

    __tablename__ = "files"

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: int = Field(foreign_key="conversations.id", index=True)
    run_id: str | None = Field(default=None, max_length=32)
    platform: str = Field(max_length=32)
    platform_file_id: str = Field(max_length=400)
    kind: str = Field(max_length=16)
    name: str | None = Field(default=None, max_length=400)
    mime_type: str | None = Field(default=None, max_length=200)
    size: int = Field(default=0, sa_type=BigInteger)
    sha256: str = Field(max_length=64)
    data: bytes = Field(sa_type=LargeBinary)
    created_at: datetime = _ts()


class Run(SQLModel, table=True):
    """One agent run (one answered message or wakeup)."""

    __tablename__ = "runs"

    id: str = Field(primary_key=True, max_length=32)
    conversation_id: int = Field(foreign_key="conversations.id", index=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    source: str = Field(default="user", max_length=16)
    status: str = Field(default="running", max_length=16)
    model: str = Field(max_length=100)
    persona_name: str | None = Field(default=None, max_length=100)
    iterations: int = 0
    tokens: int = Field(default=0, sa_type=BigInteger)
    audio_seconds: float = 0.0
    """Seconds of voice messages and audio transcribed for the run's messages."""
    document_chars: int = Field(default=0, sa_type=BigInteger)
    """Characters of documents read out of the run's messages' files."""
    error: str | None = Field(default=None, sa_type=Text)
    started_at: datetime = _ts(index=True)
    finished_at: datetime | None = _ts_optional()


class TokenLog(SQLModel, table=True):
    """One LLM call's tokens and estimated cost."""

    __tablename__ = "token_logs"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, max_length=32, index=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    conversation_id: int | None = Field(default=None, foreign_key="conversations.id")
    platform: str = Field(max_length=32)
    model: str = Field(max_length=100)
    purpose: str = Field(default="chat", max_length=32)
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    created_at: datetime = _ts(index=True)


class InboxItem(SQLModel, table=True):
    """One accepted platform message: stored, with its whole normalized content,
    before the platform is acknowledged. The database is the queue.

    `state`: pending → running → a final state (answered, silent, failed,
    command, refused, blocked, cancelled, merged). A running item is leased to
    one instance (`lease_owner` until `lease_expires_at`, renewed while its run
    goes on); an expired lease is taken over and the message run again, up to
    `[inbox] max_attempts`. (platform, event_id) is unique: a redelivery is a
    no-op."""

    __tablename__ = "inbox"
    __table_args__ = (
        UniqueConstraint("platform", "event_id"),
        Index("ix_inbox_state_lease_expires_at", "state", "lease_expires_at"),
        Index("ix_inbox_conversation_key_id", "conversation_key", "id"),
        # The messages waiting for a conversation (`Inbox.claim_pending`), and
        # only them: a claim does not scan a backlog, a running row costs nothing.
        Index(
            "ix_inbox_pending_conversation_key",
            "conversation_key",
            "state",  # so that SQLite, which has no statistics, prefers it
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending'"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    platform: str = Field(max_length=32)
    event_id: str = Field(max_length=200)
    conversation_key: str = Field(max_length=400)
    source: str = Field(default="user", max_length=16)
    state: str = Field(default="pending", max_length=16)
    payload: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    """The `IncomingMessage` (bot.pipeline.codec); None for rows migrated from dedupe."""
    deliver: bool = True
    """False: the caller answers through its own channel (an interaction)."""
    attempts: int = 0
    run_id: str | None = Field(default=None, max_length=32)
    lease_owner: str | None = Field(default=None, max_length=120)
    lease_expires_at: datetime | None = _ts_optional()
    error: str | None = Field(default=None, sa_type=Text)
    drafts: list[str] | None = Field(default=None, sa_type=JSON)
    """Messages its run posted while streaming (closed after a crash)."""
    created_at: datetime = _ts(index=True)
    finished_at: datetime | None = _ts_optional()


class OutboxItem(SQLModel, table=True):
    """A reply stored before it is sent (with the turn that produced it).

    Delivery records the platform message id of every part as it goes
    (`part_ids`), so a recovered reply continues after the last part sent and
    no part is posted twice by us. `state`: pending → sent | failed."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_state_lease_expires_at", "state", "lease_expires_at"),)

    id: int | None = Field(default=None, primary_key=True)
    inbox_id: int | None = Field(default=None, index=True)
    run_id: str | None = Field(default=None, max_length=32)
    platform: str = Field(max_length=32)
    channel_id: str = Field(max_length=128)
    thread_id: str | None = Field(default=None, max_length=128)
    reply_to_message_id: str | None = Field(default=None, max_length=128)
    server_id: str | None = Field(default=None, max_length=128)
    kind: str = Field(default="answer", max_length=16)
    private: bool = False
    text: str = Field(sa_type=Text)
    buttons: list[list[str]] | None = Field(default=None, sa_type=JSON)
    drafts: list[str] | None = Field(default=None, sa_type=JSON)
    """Streamed messages the reply is edited into (`Reply.drafts`)."""
    state: str = Field(default="pending", max_length=16)
    part_ids: list[str] | None = Field(default=None, sa_type=JSON)
    attempts: int = 0
    lease_owner: str | None = Field(default=None, max_length=120)
    lease_expires_at: datetime | None = _ts_optional()
    error: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = _ts()
    sent_at: datetime | None = _ts_optional()


class ToolError(SQLModel, table=True):
    __tablename__ = "tool_errors"

    id: str = Field(primary_key=True, max_length=40)
    conversation_id: int | None = Field(default=None, foreign_key="conversations.id", index=True)
    run_id: str | None = Field(default=None, max_length=32)
    tool_name: str = Field(max_length=128)
    arguments: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    summary: str = Field(sa_type=Text)
    detail: str = Field(sa_type=Text)
    created_at: datetime = _ts()


class DeliveryFailure(SQLModel, table=True):
    """A reply (or part of one) that could not be delivered."""

    __tablename__ = "delivery_failures"

    id: int | None = Field(default=None, primary_key=True)
    platform: str = Field(max_length=32)
    conversation_key: str = Field(max_length=400, index=True)
    channel_id: str = Field(max_length=128)
    thread_id: str | None = Field(default=None, max_length=128)
    text: str = Field(sa_type=Text)
    reason: str = Field(sa_type=Text)
    created_at: datetime = _ts()


class AuditEntry(SQLModel, table=True):
    __tablename__ = "audit_log"

    id: int | None = Field(default=None, primary_key=True)
    actor_user_id: int | None = Field(default=None, foreign_key="users.id")
    actor: str = Field(max_length=200)
    """Who, as "platform:platform_user_id" (or "cli")."""
    action: str = Field(max_length=64)
    target: str | None = Field(default=None, max_length=200)
    outcome: str = Field(default="ok", max_length=16)
    where: str | None = Field(default=None, max_length=400)
    details: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    created_at: datetime = _ts(index=True)


class RevokedSession(SQLModel, table=True):
    """An admin dashboard session ended by its logout, kept until it would have
    expired so that every instance refuses its cookie (`bot.store.revocations`)."""

    __tablename__ = "revoked_sessions"

    digest: str = Field(primary_key=True, max_length=64)
    """SHA-256 (hex) of the session's nonce: the cookie itself is never stored."""
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False, index=True)
    revoked_at: datetime = _ts()


class ScheduledJob(SQLModel, table=True):
    """A wakeup: at each fire time the agent runs `prompt` in `conversation_id`,
    charged to `owner_user_id`. The source of truth; the scheduler's memory is
    rebuilt from it.

    `state`: active | paused | done | failed | removed. `version` grows on every
    change; firing claims the row by compare-and-set on it, so one fire runs once
    even with several instances. A claimed fire holds a lease (`lease_owner`,
    `lease_expires_at`) renewed while it runs; a fire whose lease expired is
    taken over."""

    __tablename__ = "scheduled_jobs"
    __table_args__ = (Index("ix_scheduled_jobs_state_next_run_at", "state", "next_run_at"),)

    id: int | None = Field(default=None, primary_key=True)
    owner_user_id: int = Field(foreign_key="users.id", index=True)
    conversation_id: int = Field(foreign_key="conversations.id", index=True)
    chat_type: str = Field(default="direct", max_length=16)
    prompt: str = Field(sa_type=Text)
    trigger_kind: str = Field(max_length=16)
    """date | interval | cron"""
    trigger_expr: str = Field(max_length=200)
    """date: ISO UTC instant; interval: seconds; cron: the 5-field expression."""
    timezone: str = Field(default="UTC", max_length=64)
    anchor_at: datetime = _ts()
    """interval: the first fire time (later ones are anchor + k * interval)."""
    description: str = Field(default="", max_length=200)
    state: str = Field(default="active", max_length=16)
    pause_reason: str | None = Field(default=None, max_length=32)
    next_run_at: datetime | None = _ts_optional()
    version: int = 0
    running_since: datetime | None = _ts_optional()
    fire_at: datetime | None = _ts_optional()
    """The scheduled time of the fire being run (set with `running_since`)."""
    lease_owner: str | None = Field(default=None, max_length=120)
    lease_expires_at: datetime | None = _ts_optional()
    """A running fire is leased like a message; once expired (its process died)
    the fire is taken over and run again."""
    last_run_at: datetime | None = _ts_optional()
    last_status: str | None = Field(default=None, max_length=24)
    last_error: str | None = Field(default=None, sa_type=Text)
    last_run_id: str | None = Field(default=None, max_length=32)
    run_count: int = 0
    failure_count: int = 0
    """Consecutive failures (runs or deliveries); reset by a success."""
    missed_count: int = 0
    pending_replies: list[str] | None = Field(default=None, sa_type=JSON)
    """Replies not delivered yet, retried at `retry_at`."""
    retry_at: datetime | None = _ts_optional()
    created_at: datetime = _ts()
    updated_at: datetime = _ts()


class LinkCode(SQLModel, table=True):
    """A one-time code from `/link` (only its SHA-256 is stored)."""

    __tablename__ = "link_codes"

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    code_hash: str = Field(max_length=64, unique=True)
    issued_on: str = Field(max_length=200)
    """The account that asked, "platform:platform_user_id"."""
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False)
    used_at: datetime | None = _ts_optional()
    used_by: str | None = Field(default=None, max_length=200)
    created_at: datetime = _ts()


class ConversationSummary(SQLModel, table=True):
    """A compaction of a conversation: messages with id <= `up_to_message_id` are
    replaced, for the LLM, by `summary`. `kind` "truncation" is the fallback when
    summarizing failed: the messages are dropped and the previous summary kept."""

    __tablename__ = "conversation_summaries"

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: int = Field(foreign_key="conversations.id", index=True)
    up_to_message_id: int
    summary: str = Field(default="", sa_type=Text)
    kind: str = Field(default="summary", max_length=16)
    messages: int = 0
    """How many stored messages this compaction covered."""
    run_id: str | None = Field(default=None, max_length=32)
    model: str | None = Field(default=None, max_length=100)
    error: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = _ts()


class Memory(SQLModel, table=True):
    """A durable fact about a user, saved by the agent. Full-text indexed outside
    the models (migration 0003): FTS5 on SQLite, a GIN expression index on PostgreSQL."""

    __tablename__ = "memories"

    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    text: str = Field(sa_type=Text)
    conversation_id: int | None = Field(default=None, foreign_key="conversations.id")
    run_id: str | None = Field(default=None, max_length=32)
    created_at: datetime = _ts()


class StoredToolResult(SQLModel, table=True):
    """A tool result too large for the context, kept whole for `get_tool_result`."""

    __tablename__ = "tool_results"

    id: str = Field(primary_key=True, max_length=40)
    conversation_id: int = Field(foreign_key="conversations.id", index=True)
    run_id: str | None = Field(default=None, max_length=32)
    tool_name: str = Field(max_length=128)
    tool_use_id: str | None = Field(default=None, max_length=128)
    user_id: int | None = None
    """Set for a document a user sent (tool_name "document"): theirs to read,
    whichever run answers it; otherwise the run's user decides."""
    content: str = Field(sa_type=Text)
    chars: int = 0
    created_at: datetime = _ts()


class TraceSpan(SQLModel, table=True):
    """One step of a run: an LLM call (kind "llm", name = model) or a tool call
    (kind "tool", name = tool); internal turns ("compaction", "memory_flush")
    are recorded under the run that triggered them."""

    __tablename__ = "trace_spans"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=32, index=True)
    kind: str = Field(max_length=16)
    name: str = Field(max_length=128)
    started_at: datetime = _ts()
    duration_ms: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    is_error: bool = False
    detail: str | None = Field(default=None, sa_type=Text)
    """The stop reason of an LLM call; the error summary of a failed tool."""
    call_id: str | None = Field(default=None, max_length=64)
    """A tool span's call (the model's tool_use id)."""
    parent_call_id: str | None = Field(default=None, max_length=64)
    """A sub-agent's span: the `delegate_task` call it ran under."""


class Lease(SQLModel, table=True):
    """A named lease held by one instance until `expires_at` (renewed while it is
    needed): "conversation:<key>" while a run of that conversation goes on,
    "compaction:<key>", "heartbeat:<persona>:<key>", "leader:<what>". Taken with
    one atomic upsert that succeeds only when the lease is free, expired or
    already ours; `token` changes on every take, so a late release of an older
    take never frees a newer one."""

    __tablename__ = "leases"

    name: str = Field(primary_key=True, max_length=450)
    owner: str = Field(max_length=120)
    token: str = Field(max_length=32)
    expires_at: datetime = Field(sa_type=UTCDateTime, nullable=False, index=True)
    user_id: int | None = None
    """The user a conversation's run answers (who may /stop it besides admins)."""
    run_id: str | None = Field(default=None, max_length=32)
    stop_requested_by: str | None = Field(default=None, max_length=200)
    """Set by /stop on any instance; the holder stops its run."""
    acquired_at: datetime = _ts()


class Instance(SQLModel, table=True):
    """A running `switchboard run` (or chat) process, for operators: it marks
    itself seen every sweep; one not seen for a while is gone."""

    __tablename__ = "instances"

    id: str = Field(primary_key=True, max_length=120)
    host: str = Field(max_length=200)
    pid: int = 0
    platforms: list[str] | None = Field(default=None, sa_type=JSON)
    started_at: datetime = _ts()
    seen_at: datetime = _ts(index=True)
