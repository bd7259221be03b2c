"""`switchboard models check`: ask every configured model once.

Every model the config names (`[llm] model`, `fast_model`, `auxiliary_model`,
`fallback`, `[budgets] economy_model`, and the personas' models and
fallbacks) gets one tiny request through its provider, alone (no fallback):
each is printed as ok with its latency, or failed with the reason. Exit 1
when any failed. A running service is not needed, nor asked.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs (`bot.cli`: --version loads no config)
    from bot.config import Secrets, Settings
    from bot.llm.router import ModelRouter

PROBE = "Reply with the word: ok"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", parents=[common], help="the configured models")
    actions = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check", parents=[common], help="call each configured model once and say how it went"
    )
    check.set_defaults(func=cmd_models_check)


async def cmd_models_check(args: argparse.Namespace, settings: Settings, secrets: Secrets) -> int:
    from bot.formatting.text import columns
    from bot.llm.providers import build_router
    from bot.personas import load_persona_dir

    persona_models = [
        m for record, _ in load_persona_dir(settings.personas.dir)
        for m in (record.model, *(record.fallback or ())) if m
    ]  # fmt: skip
    models = list(dict.fromkeys([*settings.configured_models(), *persona_models]))
    key = secrets.anthropic_api_key
    router = build_router(
        settings.llm, os.environ, builtin_key=key.get_secret_value() if key else None
    )
    try:
        results = await asyncio.gather(*(check(router, model) for model in models))
    finally:
        await router.aclose()
    rows = [[model, outcome] for model, outcome, _ in results]
    for line in columns(rows):
        print(line)
    failed = sum(1 for *_, ok in results if not ok)
    return 1 if failed else 0


async def check(router: ModelRouter, model: str) -> tuple[str, str, bool]:
    """(model, "ok 123 ms" or "failed: why", whether it answered)."""
    from bot.errors import ProviderError
    from bot.llm.types import ChatMessage, LLMRequest, TextBlock

    request = LLMRequest(
        model=model,
        messages=(ChatMessage("user", (TextBlock(PROBE),)),),
        max_tokens=16,
        cache=False,
    )
    started = time.monotonic()
    try:
        await router.complete(request)
    except ProviderError as exc:
        return model, f"failed: {type(exc).__name__}: {exc}", False
    return model, f"ok {int((time.monotonic() - started) * 1000)} ms", True
