"""`[llm.providers.NAME]`, `provider/model` names, fallback, auxiliary and
economy models in config: what is accepted, what is refused and how."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.config import Settings, split_model
from bot.llm.pricing import estimate_cost, unpriced
from bot.types import Usage

OLLAMA = {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"}


def settings(**llm: Any) -> Settings:
    return Settings.model_validate({"llm": llm})


def test_bare_names_keep_meaning_the_built_in_provider() -> None:
    config = settings(model="claude-sonnet-5-5", fallback=["claude-haiku-5-5"])
    assert split_model(config.llm.model) == ("anthropic", "claude-sonnet-5-5")
    assert split_model("anthropic/claude-haiku-5-5") == ("anthropic", "claude-haiku-5-5")
    assert config.llm.auxiliary == config.llm.fast_model  # unset: as before


def test_the_part_after_the_prefix_is_the_api_model_name() -> None:
    config = settings(
        model="openrouter/meta-llama/llama-4", providers={"openrouter": {"kind": "openai"}}
    )
    assert split_model(config.llm.model) == ("openrouter", "meta-llama/llama-4")


@pytest.mark.parametrize(
    ("llm", "words"),
    [
        ({"model": "ollama/llama3"}, "names the provider 'ollama', which is not configured"),
        ({"fallback": ["ollama/"], "providers": {"ollama": OLLAMA}}, "names no model"),
        ({"providers": {"anthropic": OLLAMA}}, "the built-in provider"),
        ({"providers": {"Ollama": OLLAMA}}, "lowercase"),
        ({"providers": {"x": {**OLLAMA, "api_key_env": "sk-abc123"}}}, "environment variable"),
        ({"providers": {"x": {**OLLAMA, "supports": ["video"]}}}, "supports"),
        ({"auxiliary_model": "cheap/x"}, "'cheap'"),
    ],
)
def test_mistakes_are_refused_with_a_clear_reason(llm: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        settings(**llm)
    assert words in str(caught.value)


def test_the_economy_model_needs_a_configured_provider() -> None:
    with pytest.raises(ValidationError, match=r"budgets\.economy_model"):
        Settings.model_validate({"budgets": {"economy_model": "local/small"}})
    config = Settings.model_validate(
        {"budgets": {"economy_model": "local/small"}, "llm": {"providers": {"local": OLLAMA}}}
    )
    assert "local/small" in config.configured_models()


def test_a_key_pool_alone_is_enough() -> None:
    config = settings(providers={"groq": {"kind": "openai", "api_key_envs": ["G1", "G2"]}})
    assert config.llm.providers["groq"].key_envs == ["G1", "G2"]
    both = settings(
        providers={"g": {"kind": "openai", "api_key_env": "G1", "api_key_envs": ["G2"]}}
    )
    assert both.llm.providers["g"].key_envs == ["G1", "G2"]


def test_prices_per_model_and_unknown_ones_at_the_highest() -> None:
    config = settings(
        prices={
            "anthropic/claude-haiku-5-5": {"input": 2, "output": 6},
            "local/m": {"input": 0, "output": 0},
        },
        providers={"local": OLLAMA},
    )
    prices = config.llm.prices
    assert prices["claude-haiku-5-5"].input == 2  # "anthropic/x" is the bare name
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert estimate_cost("local/m", usage, prices) == 0.0  # free when priced so
    assert estimate_cost("local/other", usage, prices) == 30.0  # opus: 5 + 25
    assert estimate_cost("claude-sonnet-5-5-20261001", usage, prices) == 18.0
    assert unpriced(["local/m", "local/other", "claude-opus-5-5"], prices) == ["local/other"]
