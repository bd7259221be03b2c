"""Settings: file + env overrides, clear one-line errors, secrets only from env."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from bot.config import DEFAULT_PRICES, Secrets, Settings, load_settings
from bot.errors import ConfigError
from bot.logs import MASK, RedactingFilter, setup_logging
from bot.types import Role
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings.database.url == "sqlite+aiosqlite:///./data/switchboard.db"
    assert settings.llm.max_iterations == 10
    assert settings.budgets.for_role(Role.GUEST) == 5000
    assert settings.budgets.for_role(Role.OWNER) is None
    assert settings.enabled_platforms() == []


def test_the_example_file_documents_every_setting():
    settings = load_settings(ROOT / "config.example.toml", environ={})
    # the example shows the defaults (skills: the folder beside the file, its default)
    assert settings == Settings(skills={"paths": [ROOT / "skills"]})
    text = (ROOT / "config.example.toml").read_text()
    for section, model in Settings.model_fields.items():
        assert f"[{section}]" in text, section
        for key in model.annotation.model_fields:  # type: ignore[union-attr]
            if key != "prices":  # a sub-table (`[streaming.telegram]`) counts as documented
                documented = f"{key} =" in text or f"[{section}.{key}]" in text
                assert documented, f"{section}.{key} is not documented"


def test_default_models_are_current():
    from anthropic._data import DEPRECATED_MODELS

    settings = Settings()
    assert settings.llm.model not in DEPRECATED_MODELS
    assert settings.llm.fast_model not in DEPRECATED_MODELS
    assert settings.llm.model in DEFAULT_PRICES and settings.llm.fast_model in DEFAULT_PRICES


def test_env_overrides_beat_the_file(tmp_path: Path):
    path = write(tmp_path, '[llm]\nmodel = "a"\nmax_iterations = 4\n[budgets]\nguest = 7\n')
    settings = load_settings(
        path,
        environ={
            "SWITCHBOARD__LLM__MAX_ITERATIONS": "6",
            "SWITCHBOARD__BUDGETS__USER": "unlimited",
            "SWITCHBOARD__ADMIN__OWNERS": '["console:root"]',
            "SWITCHBOARD__TELEGRAM__ENABLED": "true",
        },
    )
    assert (settings.llm.model, settings.llm.max_iterations) == ("a", 6)
    assert settings.budgets.guest == 7 and settings.budgets.user is None
    assert settings.admin.owners == ("console:root",)
    assert settings.enabled_platforms() == ["telegram"]


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (
            "[llm]\nmax_iterations = 0\n",
            {},
            "config.toml: llm.max_iterations: Input should be greater than or equal to 1 (got 0)",
        ),
        ("[llm]\nmodle = 'x'\n", {}, "config.toml: llm.modle: unknown setting"),
        ("[budgets]\nguest = 'lots'\n", {}, "config.toml: budgets.guest:"),
        ("[llm\n", {}, "config.toml: invalid TOML"),
        (
            "[database]\nurl = 'sqlite:///x.db'\n",
            {},
            "database.url: must start with sqlite+aiosqlite://",
        ),
        (
            "[admin]\nowners = ['bob']\n",
            {},
            'admin.owners: "bob" is not of the form "platform:user_id"',
        ),
        ("[telegram]\nmode = 'carrier-pigeon'\n", {}, "config.toml: telegram.mode:"),
        (
            "",
            {"SWITCHBOARD__LLM__MAX_TOKENS": "-1"},
            "environment (SWITCHBOARD__LLM__MAX_TOKENS): llm.max_tokens",
        ),
        (
            "[llm]\napi_key = 'sk-ant-123'\n",
            {},
            "llm.api_key: secrets are not read from the config file",
        ),
        ("[telegram]\ntoken = '123:abc'\n", {}, "telegram.token: secrets are not read"),
    ],
)
def test_invalid_values_name_file_key_and_problem(tmp_path: Path, text: str, env, message: str):  # type: ignore[no-untyped-def]
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ=env)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "sk-ant-123" not in str(info.value)


def test_secrets_come_from_env_and_never_print():
    secrets = Secrets.from_env({"ANTHROPIC_API_KEY": "sk-ant-verysecret", "DISCORD_BOT_TOKEN": ""})
    assert secrets.require("anthropic_api_key") == "sk-ant-verysecret"
    assert "verysecret" not in repr(secrets) and "verysecret" not in str(secrets)
    assert secrets.discord_bot_token is None
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN is not set"):
        secrets.require("discord_bot_token")


def test_logs_redact_secrets_and_tokens_in_urls():
    stream = io.StringIO()
    setup_logging("DEBUG", "text", ["my-configured-secret"], stream=stream)
    log = logging.getLogger("switchboard.test")
    log.info("GET https://api.telegram.org/bot123456:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0/getMe")
    log.info("key=%s", "my-configured-secret")
    log.warning("slack said %s", "xoxb-1234567890-abcdefghij")
    log.info("headers {'x-api-key': 'sk-ant-api03-abcdefghijklmnop'}")
    try:
        raise RuntimeError("failed with token 123456:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0")
    except RuntimeError:
        log.exception("boom")
    out = stream.getvalue()
    for secret in (
        "AAHfiqksKZ8WmR2zSjiQ7",
        "my-configured-secret",
        "xoxb-1234567890",
        "sk-ant-api03",
    ):
        assert secret not in out
    assert out.count(MASK) >= 5
    assert "/bot[REDACTED]/getMe" in out
    logging.getLogger().handlers.clear()


def test_redaction_keeps_ordinary_text():
    redactor = RedactingFilter(["hunter2hunter2"])
    assert redactor.redact("user 42 said hello at 10:30") == "user 42 said hello at 10:30"
