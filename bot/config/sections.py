"""The typed sections of the settings file, one model per `[section]`.

`bot.config` assembles them into `Settings` and loads the file; every model
forbids unknown keys so a typo is an error, not a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from bot.types import Role

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding the `bot` package (the checkout, in development)."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _unlimited(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return None
    return value


TokenAllowance = Annotated[Annotated[int, Field(ge=0)] | None, BeforeValidator(_unlimited)]
"""A token count, or None for unlimited (written as "unlimited" in TOML)."""


class DatabaseSettings(Section):
    url: str = "sqlite+aiosqlite:///./data/switchboard.db"
    schema_name: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """PostgreSQL only: the schema to use (search_path)."""
    busy_timeout_ms: int = Field(default=5000, ge=0)
    echo: bool = False
    pool_size: int = Field(default=10, ge=1, le=500)
    """PostgreSQL: connections kept open (each instance; mind max_connections)."""
    max_overflow: int = Field(default=20, ge=0, le=500)
    """PostgreSQL: extra connections opened under load, kept while it lasts,
    closed as they come back once unneeded for a minute (`bot.store.pool`)."""
    pool_timeout_seconds: float = Field(default=30.0, gt=0)
    """PostgreSQL: how long a statement may wait for a free connection."""
    group_commit: bool = True
    """SQLite: writes queued together share one commit (`bot.store.group`);
    off: every write commits alone."""

    @field_validator("url")
    @classmethod
    def _async_driver(cls, url: str) -> str:
        if not url.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValueError(
                "must start with sqlite+aiosqlite:// or postgresql+asyncpg:// "
                "(an async driver is required)"
            )
        return url


class ModelLimits(Section):
    """What the agent must know about a model to manage its context."""

    context_window: int = Field(default=200_000, ge=1000)
    """Input tokens the model accepts."""
    min_cache_tokens: int = Field(default=1024, ge=0)
    """The shortest prompt prefix the API caches; shorter ones get no breakpoint."""


DEFAULT_MODEL_LIMITS: dict[str, ModelLimits] = {
    "claude-opus-5-5": ModelLimits(context_window=200_000, min_cache_tokens=512),
    "claude-sonnet-5-5": ModelLimits(context_window=200_000, min_cache_tokens=1024),
    "claude-haiku-5-5": ModelLimits(context_window=200_000, min_cache_tokens=2048),
}


class AgentSettings(Section):
    """Context management, memory, input guard and run control."""

    guard_mode: Literal["off", "log", "warn", "block"] = "warn"
    confirm_minutes: int = Field(default=10, ge=1, le=1440)
    """How long a consequential action held for confirmation stays open."""
    max_message_chars: int = Field(default=32_768, ge=100)
    tool_result_max_chars: int = Field(default=8000, ge=500)
    context_window: int = Field(default=200_000, ge=1000)
    min_cache_tokens: int = Field(default=1024, ge=0)
    models: dict[str, ModelLimits] = Field(default_factory=lambda: dict(DEFAULT_MODEL_LIMITS))
    history_step: int = Field(default=5, ge=1)
    prune_threshold: float = Field(default=0.5, gt=0, le=1)
    compact_threshold: float = Field(default=0.75, gt=0, le=1)
    compact_messages: int = Field(default=50, ge=6)
    keep_last_messages: int = Field(default=4, ge=1)
    summary_max_tokens: int = Field(default=1024, ge=64)
    summary_timeout_seconds: float = Field(default=60.0, gt=0)
    memory: bool = True
    memory_flush: bool = True
    memory_flush_messages: int = Field(default=10, ge=1)
    memory_flush_iterations: int = Field(default=5, ge=1)
    memory_flush_timeout_seconds: float = Field(default=90.0, gt=0)
    memory_recall: int = Field(default=3, ge=0)
    run_timeout_seconds: float = Field(default=300.0, gt=0)
    max_concurrent: int = Field(default=0, ge=0)
    """Conversations (threads) of one channel running at once; 0: no limit per
    channel (`[llm] max_in_flight` bounds the LLM calls of all of them)."""
    max_continuations: int = Field(default=1, ge=0, le=5)

    @field_validator("models")
    @classmethod
    def _merge_models(cls, value: dict[str, ModelLimits]) -> dict[str, ModelLimits]:
        return {**DEFAULT_MODEL_LIMITS, **value}

    def limits(self, model: str) -> ModelLimits:
        """The model's limits (a dated snapshot uses its family's), else the defaults."""
        found = self.models.get(model)
        if found is None:
            matches = [name for name in self.models if model.startswith(name)]
            if matches:
                found = self.models[max(matches, key=len)]
        return found or ModelLimits(
            context_window=self.context_window, min_cache_tokens=self.min_cache_tokens
        )


RUN_CAP_FLOOR = 16_000
"""A run may always spend this much (within the monthly allowance), so a small
allowance still allows a useful answer."""


class BudgetSettings(Section):
    """Monthly token allowance per role; "unlimited" (None) means no limit."""

    guest: TokenAllowance = 5000
    user: TokenAllowance = 200_000
    admin: TokenAllowance = None
    owner: TokenAllowance = None
    run_share: float = Field(default=0.25, gt=0, le=1)
    """One run may spend at most this share of a limited monthly allowance."""
    run_max_tokens: int | None = Field(default=500_000, ge=1000)
    """And at most this many tokens, limited or not (None: no fixed cap)."""
    economy_model: str | None = None
    """A user whose remaining share of a limited allowance is below
    `economy_below` is answered by this model instead (`/usage` says so);
    unset: no economy model."""
    economy_below: float = Field(default=0.1, gt=0, lt=1)

    @field_validator("economy_model")
    @classmethod
    def _empty_model(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    def for_role(self, role: Role) -> int | None:
        value: int | None = getattr(self, role.value)
        return value

    def run_cap(self, limit: int | None) -> int | None:
        """What one run may spend for a user whose allowance is `limit`."""
        caps = [self.run_max_tokens] if self.run_max_tokens is not None else []
        if limit is not None:
            caps.append(max(int(limit * self.run_share), RUN_CAP_FLOOR))
        return min(caps) if caps else None


class InboxSettings(Section):
    """The durable message path: leases, recovery, retries."""

    lease_seconds: float = Field(default=20.0, ge=2.0)
    """How long a claimed message (or reply, or scheduled fire) stays with an
    instance without renewal; after a crash, the longest wait before another
    process takes it over."""
    sweep_seconds: float = Field(default=5.0, gt=0)
    """How often expired leases are looked for (and the spool replayed)."""
    max_attempts: int = Field(default=3, ge=1, le=20)
    """A message taken over this many times is marked failed (the user gets an apology)."""
    max_busy: int = Field(default=16, ge=1)
    """Messages doing CPU or database work at once (those waiting for the model or
    their turn do not count). Beyond it, accepted messages wait in the inbox."""
    max_loop_lag_ms: int = Field(default=250, ge=0)
    """A new message waits while the event loop runs later than this, so that
    intake and /healthz keep up under overload (0: never wait)."""
    drain_seconds: float = Field(default=30.0, ge=0)
    """At shutdown (SIGTERM), how long running work may take to finish before
    it is handed back to the inbox for the next process."""
    write_retry_seconds: float = Field(default=30.0, ge=0)
    """How long to retry writing a finished turn before spooling it."""
    spool_path: Path | None = None
    """Turns that could not be written wait here (default: next to the SQLite
    database, else ./data/spool.jsonl)."""


class AdminSettings(Section):
    owners: tuple[str, ...] = ()

    @field_validator("owners")
    @classmethod
    def _platform_ids(cls, owners: tuple[str, ...]) -> tuple[str, ...]:
        for owner in owners:
            platform, sep, user_id = owner.partition(":")
            if not sep or not platform or not user_id:
                raise ValueError(f'"{owner}" is not of the form "platform:user_id"')
        return owners


class PersonaSettings(Section):
    dir: Path = PACKAGE_ROOT / "personas"


class LoggingSettings(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"
    file: str | None = None
    """Append log lines to this file instead of writing them to stderr."""


class ServerSettings(Section):
    """The service's own web server (webhooks, /healthz)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Request bodies over this get 413 (no platform sends webhooks that large)."""
    metrics: bool = True
    """Serve Prometheus metrics at GET /metrics (false: 404)."""
    trust_proxy: bool = False
    """Behind one TLS-terminating reverse proxy: the admin session cookie is
    Secure and a client's address is the right-most X-Forwarded-For entry
    (`bot.web.clients`); false: that header is ignored."""


class StreamOverride(Section):
    """`[streaming.<platform>]`: a platform's own setting, else `[streaming]`'s."""

    enabled: bool | None = None
    interval_seconds: float | None = Field(default=None, gt=0)


class StreamingSettings(Section):
    """Replies shown while the model writes them (drafts, edits, native streams)."""

    enabled: bool = True
    interval_seconds: float = Field(default=1.0, gt=0)
    """At most one update of a streamed message per this many seconds."""
    telegram: StreamOverride = StreamOverride()
    slack: StreamOverride = StreamOverride()
    discord: StreamOverride = StreamOverride()
    console: StreamOverride = StreamOverride()

    def enabled_for(self, platform: str) -> bool:
        own = getattr(self, platform, None)
        value = own.enabled if isinstance(own, StreamOverride) else None
        return self.enabled if value is None else value

    def interval_for(self, platform: str) -> float:
        own = getattr(self, platform, None)
        value = own.interval_seconds if isinstance(own, StreamOverride) else None
        return self.interval_seconds if value is None else value


class ConsoleSettings(Section):
    user: str | None = None
    """Default `platform_user_id` of `switchboard chat` (else $USER)."""


class TelegramSettings(Section):
    enabled: bool = False
    library: Literal["aiogram", "python-telegram-bot"] = "aiogram"
    mode: Literal["polling", "webhook"] = "polling"
    api_base_url: str = "https://api.telegram.org"
    webhook_url: str | None = None
    """Public URL Telegram posts updates to (webhook mode)."""
    require_mention: bool = True
    keep_group_context: bool = False
    handle_edited: bool = False
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    max_retry_after_seconds: float = Field(default=60.0, ge=0)
    """A 429 asking to wait longer than this fails the send (recorded, not waited out)."""


class SlackSettings(Section):
    enabled: bool = False
    mode: Literal["socket", "http"] = "socket"
    api_base_url: str = "https://slack.com/api/"
    require_mention: bool = True
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    command: str = Field(default="/switchboard", pattern=r"^/[a-z0-9_-]{1,31}$")
    """The one slash command that carries every core command (`/switchboard budget`)."""
    typing_status: str = ""
    """Shown with assistant.threads.setStatus while the agent works; empty: off."""

    @field_validator("api_base_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value if value.endswith("/") else value + "/"


class DiscordSettings(Section):
    enabled: bool = False
    api_base_url: str = "https://discord.com/api/v10"
    """REST base (discord.py's `Route.BASE`); the gateway URL comes from its /gateway/bot."""
    require_mention: bool = True
    sync_commands: bool = True
    max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    max_ratelimit_wait: float = Field(default=60.0, ge=30.0)
    shard_id: int | None = Field(default=None, ge=0)
    """With several instances: this instance's gateway shard (0 … shard_count - 1).
    Each instance runs one shard; Discord sends each guild's events to one shard
    (DMs to shard 0). None: one unsharded connection."""
    shard_count: int | None = Field(default=None, ge=1)
    catch_up_channels: int = Field(default=20, ge=0)
    """After a start or a reconnect that could not resume, read the history of
    this many recently active channels for messages the gateway never delivered
    (0: off)."""
    catch_up_hours: float = Field(default=24.0, gt=0)
    """Only channels with messages within this many hours."""
    catch_up_messages: int = Field(default=50, ge=1, le=100)
    """At most this many messages per channel."""
    """Longest 429 wait (seconds) before a send gives up and is recorded as failed."""

    @field_validator("api_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _shards(self) -> DiscordSettings:
        if (self.shard_id is None) != (self.shard_count is None):
            raise ValueError("shard_id and shard_count go together (or neither)")
        if self.shard_id is not None and self.shard_count and self.shard_id >= self.shard_count:
            raise ValueError(f"shard_id must be below shard_count ({self.shard_count})")
        return self


class RoleCounts(Section):
    """A count per role; "unlimited" (None) means no limit."""

    guest: TokenAllowance = 0
    user: TokenAllowance = 10
    admin: TokenAllowance = 50
    owner: TokenAllowance = None

    def for_role(self, role: Role) -> int | None:
        value: int | None = getattr(self, role.value)
        return value


class RoleMinutes(Section):
    """Minutes per role."""

    guest: Annotated[float, Field(ge=0)] = 60.0
    user: Annotated[float, Field(ge=0)] = 15.0
    admin: Annotated[float, Field(ge=0)] = 1.0
    owner: Annotated[float, Field(ge=0)] = 1.0

    def for_role(self, role: Role) -> float:
        value: float = getattr(self, role.value)
        return value


class SchedulerSettings(Section):
    """Scheduled wakeups (APScheduler in memory; the database is the source of truth)."""

    enabled: bool = True
    timezone: str = "UTC"
    """Time zone of `when` values without one, unless the agent passes the user's."""
    misfire_grace_seconds: int = Field(default=300, ge=1)
    sync_seconds: float = Field(default=30.0, gt=0)
    retry_seconds: int = Field(default=60, ge=1)
    retry_max_seconds: int = Field(default=3600, ge=1)
    max_retries: int = Field(default=8, ge=0)
    heartbeat_idle_minutes: float = Field(default=120.0, gt=0)
    max_jobs: RoleCounts = RoleCounts()
    min_interval_minutes: RoleMinutes = RoleMinutes()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (use an IANA name)") from None
        return value
