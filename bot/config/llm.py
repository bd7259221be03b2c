"""`[llm]`, `[llm.providers.NAME]` and `[llm.prices]`: the models and who serves them.

A model is named `provider/model` wherever a model is named (persona, role,
config): the part after the first `/` is the name sent to that provider's API
("openrouter/anthropic/claude-x" asks OpenRouter for "anthropic/claude-x").
A bare name means the built-in provider `anthropic`, which `[llm]` itself
configures (`base_url`, `ANTHROPIC_API_KEY`), so configs written before
providers existed work unchanged. `[llm.providers.NAME]` adds a provider of
`kind` "anthropic" (the Messages API at another URL or with other keys) or
"openai" (Chat Completions: OpenAI, OpenRouter, Groq, vLLM, Ollama, LM
Studio).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from bot.config.sections import Section

BUILTIN_PROVIDER = "anthropic"
"""The provider a bare model name means: `[llm]`'s own settings."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROVIDER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
ProviderFeature = Literal["images", "documents", "tools"]


def split_model(name: str) -> tuple[str, str]:
    """(provider, the model name its API takes) of a configured model name:
    "openrouter/x/y" → ("openrouter", "x/y"); a bare name → ("anthropic", name).
    Whether the provider exists is checked where the providers are known."""
    provider, sep, model = name.partition("/")
    return (provider, model) if sep else (BUILTIN_PROVIDER, name)


def plain_model(name: str) -> str:
    """The name under which a model's price and traces are kept: "anthropic/x"
    is "x" (the built-in provider's names stay bare, as before providers)."""
    provider, model = split_model(name)
    return model if provider == BUILTIN_PROVIDER else name


class Price(Section):
    """USD per million tokens. Cache writes cost 1.25x and reads 0.1x of `input`
    unless given explicitly."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)


DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-5-5": Price(input=5.0, output=25.0),
    "claude-sonnet-5-5": Price(input=3.0, output=15.0),
    "claude-haiku-5-5": Price(input=1.0, output=5.0),
}


class ProviderSettings(Section):
    """One `[llm.providers.NAME]`. Keys come from environment variables only:
    `api_key_env` names one, `api_key_envs` a pool (tried in turn when a key
    is rate limited); neither: no key (a local server). `supports` lists what
    its models take ("images", "documents", "tools"); unset: everything the
    kind can carry."""

    kind: Literal["anthropic", "openai"]
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_envs: list[str] = Field(default_factory=list)
    max_in_flight: int | None = Field(default=None, ge=1)
    """Calls to this provider in flight at once (more wait, oldest message
    first); unset: only `[llm] max_in_flight` bounds them."""
    supports: list[ProviderFeature] | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    """Unset: `[llm] timeout_seconds`."""
    max_retries: int | None = Field(default=None, ge=0, le=10)
    """The SDK's own retries before a failure counts; unset: `[llm] max_retries`."""

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("must be the name of an environment variable (not the key itself)")
        return value

    @field_validator("api_key_envs")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError("each must be the name of an environment variable")
        return value

    @property
    def key_envs(self) -> list[str]:
        """The environment variables of its keys, in the order they are used."""
        names = [self.api_key_env] if self.api_key_env else []
        return names + [n for n in self.api_key_envs if n not in names]


class LLMSettings(Section):
    model: str = "claude-sonnet-5-5"
    fast_model: str = "claude-haiku-5-5"
    auxiliary_model: str | None = None
    """Every call that is not a conversation's turn (compaction and mid-run
    summaries, the memory flush); unset: `fast_model`, as before."""
    fallback: list[str] = Field(default_factory=list)
    """Models tried in turn, within the same call, when a model's provider is
    overloaded, fails (5xx), times out or cannot be reached after the SDK's
    own retries; never on a bad request."""
    base_url: str | None = None
    max_iterations: int = Field(default=10, ge=1, le=100)
    max_tokens: int = Field(default=4096, ge=1)
    timeout_seconds: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)
    history_turns: int = Field(default=20, ge=1)
    tool_timeout_seconds: float = Field(default=60.0, gt=0)
    max_in_flight: int = Field(default=1000, ge=1)
    """LLM calls in flight at once, over all conversations (more wait, oldest
    message first); also the size of the HTTP connection pool to the API."""
    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("auxiliary_model")
    @classmethod
    def _empty_model(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @field_validator("prices")
    @classmethod
    def _merge_defaults(cls, value: dict[str, Price]) -> dict[str, Price]:
        return {**DEFAULT_PRICES, **{plain_model(name): price for name, price in value.items()}}

    @field_validator("providers")
    @classmethod
    def _provider_names(cls, value: dict[str, ProviderSettings]) -> dict[str, ProviderSettings]:
        for name in value:
            if name == BUILTIN_PROVIDER:
                raise ValueError(f'"{name}" is the built-in provider: [llm] configures it')
            if not _PROVIDER_NAME.match(name):
                raise ValueError(f"provider name {name!r}: lowercase letters, digits, - and _")
        return value

    @model_validator(mode="after")
    def _known_providers(self) -> LLMSettings:
        named = [("model", self.model), ("fast_model", self.fast_model)]
        if self.auxiliary_model:
            named.append(("auxiliary_model", self.auxiliary_model))
        named += [("fallback", name) for name in self.fallback]
        for key, name in named:
            self.check_model(name, key)
        return self

    def check_model(self, name: str, where: str) -> None:
        """Raise ValueError when `name` names a provider that is not configured."""
        provider, model = split_model(name)
        if not model:
            raise ValueError(f"{where}: {name!r} names no model after the provider")
        if provider != BUILTIN_PROVIDER and provider not in self.providers:
            raise ValueError(
                f"{where}: {name!r} names the provider {provider!r}, which is not configured "
                f"(add [llm.providers.{provider}], or configured: "
                f"{', '.join([BUILTIN_PROVIDER, *self.providers])})"
            )

    def secret_values(self, environ: Mapping[str, str]) -> list[str]:
        """The providers' keys (log redaction)."""
        envs = [env for p in self.providers.values() for env in p.key_envs]
        return [environ[env] for env in envs if environ.get(env)]

    @property
    def auxiliary(self) -> str:
        """The model of calls that are not a conversation's turn."""
        return self.auxiliary_model or self.fast_model

    def configured_models(self, extra: Iterable[str] = ()) -> list[str]:
        """Every model this config names (and `extra`), once each, in order."""
        names = [self.model, self.fast_model, self.auxiliary, *self.fallback, *extra]
        return list(dict.fromkeys(n for n in names if n))


def _http_url(value: str | None) -> str | None:
    if value is not None and not value.strip():
        return None
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value
