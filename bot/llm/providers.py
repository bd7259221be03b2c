"""The configured providers, as the routes of a `ModelRouter`.

Checked when built (a key's environment variable that is not set is a
`ConfigError` at start, naming the variable, never its value); each
provider's SDK is imported on its first call (`Route.module`). The built-in
provider `anthropic` is `[llm]` itself with `ANTHROPIC_API_KEY`, required
only when a configured model is served by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from bot.config import BUILTIN_PROVIDER, LLMSettings, ProviderSettings, split_model
from bot.errors import ConfigError
from bot.llm.capabilities import Feature
from bot.llm.gate import FairLimiter, GatedProvider, Provider
from bot.llm.router import KeyPool, ModelRouter, Observer, Route

if TYPE_CHECKING:
    from bot.llm.anthropic import AnthropicProvider

FEATURES: tuple[Feature, ...] = ("images", "documents", "tools")
KIND_TAKES: dict[str, dict[str, bool]] = {
    "anthropic": {"images": True, "documents": True, "tools": True},
    "openai": {"images": True, "documents": False, "tools": True},
}
MODULES = {"anthropic": "bot.llm.anthropic", "openai": "bot.llm.openai"}


def uses_builtin(models: list[str]) -> bool:
    return any(split_model(m)[0] == BUILTIN_PROVIDER for m in models)


def build_router(
    llm: LLMSettings,
    environ: Mapping[str, str],
    *,
    builtin_key: str | None,
    builtin_url_setting: str = "llm.base_url",
    on_fallback: Observer | None = None,
) -> ModelRouter:
    """A router over the built-in provider and every `[llm.providers.NAME]`."""

    def builtin() -> Provider:
        return _anthropic(
            api_key=builtin_key,
            base_url=llm.base_url,
            max_retries=llm.max_retries,
            timeout=llm.timeout_seconds,
            max_connections=llm.max_in_flight,
            url_setting=builtin_url_setting,
        )

    routes = [Route(BUILTIN_PROVIDER, builtin, MODULES["anthropic"], KIND_TAKES["anthropic"])]
    for name, config in llm.providers.items():
        routes.append(_route(name, config, llm, environ))
    return ModelRouter(routes, on_fallback)


def _route(
    name: str, config: ProviderSettings, llm: LLMSettings, environ: Mapping[str, str]
) -> Route:
    keys: list[str | None] = []
    for env in config.key_envs:
        value = environ.get(env)
        if not value:
            raise ConfigError(
                f"{env} is not set (a key of [llm.providers.{name}]; keys come only from "
                "environment variables)"
            )
        keys.append(value)
    timeout = config.timeout_seconds or llm.timeout_seconds
    retries = config.max_retries if config.max_retries is not None else llm.max_retries
    pool = config.max_in_flight or llm.max_in_flight

    url_setting = f"llm.providers.{name}.base_url"

    def client(key: str | None, env: str) -> Provider:
        if config.kind == "anthropic":
            return _anthropic(
                api_key=key, base_url=config.base_url, max_retries=retries, timeout=timeout,
                max_connections=pool, url_setting=url_setting, key_env=env,
            )  # fmt: skip
        from bot.llm.openai import OpenAIProvider

        return OpenAIProvider(
            label=name, api_key=key, base_url=config.base_url, max_retries=retries,
            timeout=timeout, max_connections=pool, url_setting=url_setting, key_env=env,
        )  # fmt: skip

    def build() -> Provider:
        envs = config.key_envs
        provider: Provider = (
            KeyPool(name, [client(k, e) for k, e in zip(keys, envs, strict=True)], envs)
            if len(keys) > 1
            else client(keys[0], envs[0])
            if keys
            else client(None, f"(none: {name} takes no key)")
        )
        if config.max_in_flight is not None:
            provider = GatedProvider(provider, FairLimiter(config.max_in_flight))
        return provider

    takes = KIND_TAKES[config.kind]
    if config.supports is not None:
        takes = {f: takes[f] and f in config.supports for f in FEATURES}
    return Route(name, build, MODULES[config.kind], takes)


def _anthropic(
    *,
    api_key: str | None,
    base_url: str | None,
    max_retries: int,
    timeout: float,
    max_connections: int,
    url_setting: str,
    key_env: str = "ANTHROPIC_API_KEY",
) -> AnthropicProvider:
    from bot.llm.anthropic import AnthropicProvider

    return AnthropicProvider(
        api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout,
        max_connections=max_connections, url_setting=url_setting, key_env=key_env,
    )  # fmt: skip
