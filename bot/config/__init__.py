"""Settings: a TOML file, then environment overrides, validated into typed models.

Secrets never come from the file: they are read from environment variables only
(`Secrets.from_env`). Any other key may be overridden from the environment as
`SWITCHBOARD__SECTION__KEY=value` (value parsed as TOML when possible, e.g.
`SWITCHBOARD__LLM__MAX_ITERATIONS=5`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SecretStr,
    ValidationError,
    model_validator,
)

from bot.config.llm import (
    BUILTIN_PROVIDER,
    DEFAULT_PRICES,
    LLMSettings,
    Price,
    ProviderSettings,
    plain_model,
    split_model,
)
from bot.config.mcp import McpServerSettings, McpSettings
from bot.config.media import MediaSettings, TranscriptionSettings
from bot.config.sections import (
    DEFAULT_MODEL_LIMITS,
    PACKAGE_ROOT,
    AdminSettings,
    AgentSettings,
    BudgetSettings,
    ConsoleSettings,
    DatabaseSettings,
    DiscordSettings,
    InboxSettings,
    LoggingSettings,
    ModelLimits,
    PersonaSettings,
    RoleCounts,
    RoleMinutes,
    SchedulerSettings,
    Section,
    ServerSettings,
    SlackSettings,
    StreamingSettings,
    StreamOverride,
    TelegramSettings,
    TokenAllowance,
)
from bot.config.web import WebSearchSettings, WebSettings
from bot.errors import ConfigError

__all__ = [  # the section models are re-exported: bot.config is their public path
    "BUILTIN_PROVIDER",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_MODEL_LIMITS",
    "DEFAULT_PRICES",
    "ENV_PREFIX",
    "PACKAGE_ROOT",
    "SECRET_ENV",
    "AdminSettings",
    "AgentSettings",
    "BudgetSettings",
    "ConsoleSettings",
    "DatabaseSettings",
    "DiscordSettings",
    "InboxSettings",
    "LLMSettings",
    "LoggingSettings",
    "McpServerSettings",
    "McpSettings",
    "MediaSettings",
    "ModelLimits",
    "PersonaSettings",
    "Price",
    "ProviderSettings",
    "RoleCounts",
    "RoleMinutes",
    "SchedulerSettings",
    "Secrets",
    "Section",
    "ServerSettings",
    "Settings",
    "SlackSettings",
    "StreamOverride",
    "StreamingSettings",
    "TelegramSettings",
    "TokenAllowance",
    "TranscriptionSettings",
    "WebSearchSettings",
    "WebSettings",
    "load_settings",
    "plain_model",
    "split_model",
]

DEFAULT_CONFIG_PATH = Path("config.toml")
ENV_PREFIX = "SWITCHBOARD__"


class Settings(Section):
    database: DatabaseSettings = DatabaseSettings()
    llm: LLMSettings = LLMSettings()
    agent: AgentSettings = AgentSettings()
    budgets: BudgetSettings = BudgetSettings()
    admin: AdminSettings = AdminSettings()
    personas: PersonaSettings = PersonaSettings()
    logging: LoggingSettings = LoggingSettings()
    server: ServerSettings = ServerSettings()
    console: ConsoleSettings = ConsoleSettings()
    telegram: TelegramSettings = TelegramSettings()
    slack: SlackSettings = SlackSettings()
    discord: DiscordSettings = DiscordSettings()
    scheduler: SchedulerSettings = SchedulerSettings()
    inbox: InboxSettings = InboxSettings()
    streaming: StreamingSettings = StreamingSettings()
    web: WebSettings = WebSettings()
    mcp: McpSettings = McpSettings()
    media: MediaSettings = MediaSettings()

    @model_validator(mode="after")
    def _economy_provider(self) -> Settings:
        if self.budgets.economy_model:
            self.llm.check_model(self.budgets.economy_model, "budgets.economy_model")
        return self

    def configured_models(self) -> list[str]:
        """Every model named in config ([llm] and the economy model)."""
        economy = self.budgets.economy_model
        return self.llm.configured_models([economy] if economy else [])

    def require_mention(self, platform: str) -> bool:
        section = getattr(self, platform, None)
        return bool(getattr(section, "require_mention", True))

    def keep_group_context(self, platform: str) -> bool:
        section = getattr(self, platform, None)
        return bool(getattr(section, "keep_group_context", False))

    def enabled_platforms(self) -> list[str]:
        return [name for name in ("telegram", "slack", "discord") if getattr(self, name).enabled]


SECRET_ENV = {
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "telegram_bot_token": "TELEGRAM_BOT_TOKEN",
    "telegram_webhook_secret": "TELEGRAM_WEBHOOK_SECRET",
    "slack_bot_token": "SLACK_BOT_TOKEN",
    "slack_app_token": "SLACK_APP_TOKEN",
    "slack_signing_secret": "SLACK_SIGNING_SECRET",
    "discord_bot_token": "DISCORD_BOT_TOKEN",
    "admin_token": "SWITCHBOARD_ADMIN_TOKEN",
}


class Secrets(BaseModel):
    """Secrets, from environment variables only. `SecretStr` keeps them out of reprs."""

    model_config = ConfigDict(frozen=True)

    anthropic_api_key: SecretStr | None = None
    telegram_bot_token: SecretStr | None = None
    telegram_webhook_secret: SecretStr | None = None
    slack_bot_token: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    discord_bot_token: SecretStr | None = None
    admin_token: SecretStr | None = None
    """The admin dashboard (`/admin`) is served only when this is set."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Secrets:
        env = os.environ if environ is None else environ
        values = {field: env.get(var) or None for field, var in SECRET_ENV.items()}
        return cls.model_validate(values)

    def require(self, field: str) -> str:
        value: SecretStr | None = getattr(self, field)
        if value is None:
            raise ConfigError(f"{SECRET_ENV[field]} is not set (secrets come only from env vars)")
        return value.get_secret_value()

    def values(self) -> list[str]:
        """Every secret that is set, for the log redaction filter."""
        return [
            secret.get_secret_value()
            for name in SECRET_ENV
            if (secret := getattr(self, name)) is not None
        ]


_SECRET_KEYS = {"api_key", "token", "bot_token", "app_token", "signing_secret", "secret"}


def load_settings(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Load settings from `path` (default ./config.toml; built-in defaults when the
    default file is absent) and `SWITCHBOARD__*` env overrides.

    Raises `ConfigError` with one line naming the file, the key and the problem."""
    env = os.environ if environ is None else environ
    explicit = path is not None
    path = path or DEFAULT_CONFIG_PATH
    source = str(path)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: invalid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
    elif explicit:
        raise ConfigError(f"{source}: file not found")
    else:
        source = "built-in defaults"
    _reject_secrets(data, source)
    overridden = _apply_env_overrides(data, env)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, overridden)) from None


def _reject_secrets(data: Mapping[str, Any], source: str, prefix: str = "") -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            _reject_secrets(value, source, f"{dotted}.")
        elif key in _SECRET_KEYS:
            raise ConfigError(
                f"{source}: {dotted}: secrets are not read from the config file; "
                f"set the environment variable instead ({', '.join(SECRET_ENV.values())})"
            )


def _apply_env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> set[str]:
    overridden: set[str] = set()
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            continue
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = _parse_env_value(raw)
        overridden.add(".".join(parts))
    return overridden


def _parse_env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _describe(exc: ValidationError, source: str, overridden: set[str]) -> str:
    error = exc.errors()[0]
    key = ".".join(str(p) for p in error["loc"]) or "(top level)"
    where = (
        f"environment ({ENV_PREFIX}{key.upper().replace('.', '__')})"
        if key in overridden
        else source
    )
    if error["type"] == "extra_forbidden":
        problem = "unknown setting"
    else:
        problem = error["msg"].removeprefix("Value error, ")
        # A bad `*_env` value may be the secret itself, pasted there: never echoed.
        shown = "input" in error and not isinstance(error["input"], dict | list)
        if shown and not key.endswith("_env"):
            problem += f" (got {error['input']!r})"
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{where}: {key}: {problem}{suffix}"
