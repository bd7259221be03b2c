"""`switchboard models check` against the fake Messages and Chat Completions
APIs: each configured model is asked once, alone, and printed ok with its
latency or failed with the reason; exit 1 when any failed."""

from __future__ import annotations

import argparse

from bot.cli.models import cmd_models_check
from bot.config import Secrets, Settings
from tests.conftest import TEST_API_KEY
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.openai_chat import FakeOpenAI, chat_error


def settings(anthropic: FakeAnthropic, openai: FakeOpenAI, *fallback: str) -> Settings:
    local = {"kind": "openai", "base_url": openai.base_url, "max_retries": 0}
    return Settings.model_validate(
        {
            "llm": {
                "base_url": anthropic.base_url,
                "max_retries": 0,
                "fallback": list(fallback),
                "providers": {"local": local},
            }
        }
    )


async def test_every_configured_model_is_checked(fake_anthropic, capsys):
    secrets = Secrets(anthropic_api_key=TEST_API_KEY)  # type: ignore[arg-type]
    async with FakeOpenAI() as openai:
        config = settings(fake_anthropic, openai, "local/good", "local/missing")
        openai.script_for(
            "missing", chat_error(404, "The model `missing` does not exist", "model_not_found")
        )
        code = await cmd_models_check(argparse.Namespace(), config, secrets)
        asked = sorted(r.model or "" for r in openai.requests)

    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert code == 1
    assert asked == ["good", "missing"]
    assert {r.model for r in fake_anthropic.requests} == {"claude-sonnet-5-5", "claude-haiku-5-5"}
    assert lines["claude-sonnet-5-5"].split()[1] == "ok"
    assert lines["local/good"].split()[1] == "ok" and lines["local/good"].endswith(" ms")
    failed = [line for line in out.splitlines() if "failed" in line]
    assert len(failed) == 1 and "does not exist" in failed[0]


async def test_all_answering_exits_zero(fake_anthropic, capsys):
    secrets = Secrets(anthropic_api_key=TEST_API_KEY)  # type: ignore[arg-type]
    async with FakeOpenAI() as openai:
        code = await cmd_models_check(
            argparse.Namespace(), settings(fake_anthropic, openai, "local/good"), secrets
        )
    assert code == 0
    assert capsys.readouterr().out.count(" ok ") == 3
