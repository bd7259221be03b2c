"""The SDK's lazily built models are built at startup, off the event loop
(`bot.llm.warm_up`), not by the first model call.

Each check that looks at what the SDK builds runs in a fresh interpreter: in
this one, earlier tests have built those models already."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from typing import Any

import httpx2
import pytest

from bot.app import service
from bot.llm import warm_up
from tests.paths import REPO_ROOT

PROBE = r"""
import asyncio, importlib, json, sys, threading
import pydantic

built = []  # (phase, class, on the event loop's thread)
phase = ["startup"]
real = pydantic.BaseModel.model_rebuild.__func__

def recording(cls, *args, **kwargs):
    on_loop = threading.current_thread() is threading.main_thread()
    built.append((phase[0], cls.__qualname__, on_loop))
    return real(cls, *args, **kwargs)

pydantic.BaseModel.model_rebuild = classmethod(recording)

from bot.llm.types import ChatMessage, LLMRequest, TextBlock, ToolSpec
from tests.fakes.anthropic import FakeAnthropic, text_reply, tool_use_reply

pytestmark = pytest.mark.slow

async def main(warm):
    if warm:
        from bot.app.service import import_provider
        await import_provider()
    else:
        await asyncio.to_thread(importlib.import_module, "bot.llm.anthropic")
    from bot.llm.anthropic import AnthropicProvider

    texts = []

    async def on_text(text):
        texts.append(text)

    async with FakeAnthropic(api_key="sk-probe") as fake:
        fake.script(text_reply("hello there"), tool_use_reply(("lookup", {"q": "x"})))
        provider = AnthropicProvider(api_key="sk-probe", base_url=fake.base_url, max_retries=0)
        tool = ToolSpec("lookup", "look a thing up", {"type": "object", "properties": {}})
        request = LLMRequest(
            model="claude-probe", messages=(ChatMessage("user", (TextBlock("hi"),)),), tools=(tool,)
        )
        phase[0] = "call"
        first = await provider.complete(request, on_text)
        second = await provider.complete(request, on_text)
        phase[0] = "after"
        await provider.aclose()
    answers = [first.stop_reason, second.stop_reason, "".join(texts)]
    print(json.dumps({"built": built, "answers": answers}))

asyncio.run(main(sys.argv[1] == "warm"))
"""


def probe(mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_without_the_warm_up_the_first_calls_build_the_sdks_models_on_the_loop() -> None:
    """What the warm-up is for (and the probe's own check): the SDK completes
    its response models on the first streamed text reply and tool use."""
    result = probe("cold")
    assert result["answers"] == ["end_turn", "tool_use", "hello there"]
    during = [(name, on_loop) for phase, name, on_loop in result["built"] if phase == "call"]
    assert during, "this SDK builds nothing lazily any more: bot.llm.warm_up may go"
    assert any(on_loop for _, on_loop in during)


def test_after_startup_the_first_calls_build_nothing() -> None:
    result = probe("warm")
    assert result["answers"] == ["end_turn", "tool_use", "hello there"]
    built = result["built"]
    assert [b for b in built if b[0] == "call"] == []
    warmed = [name for phase, name, on_loop in built if phase == "startup"]
    assert "Message" in warmed
    assert all(not on_loop for phase, _, on_loop in built if phase == "startup")


def test_the_warm_up_opens_no_socket(monkeypatch, caplog) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the warm-up tried to connect")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    with caplog.at_level(logging.DEBUG, logger="switchboard.llm"):
        warm_up.warm_up()
    assert "llm.warmed_up" in caplog.text
    assert "warm_up_failed" not in caplog.text


def stream(body: bytes) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def cut(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection reset", request=request)


@pytest.mark.parametrize(
    "answer",
    [
        lambda _request: stream(b"x"),
        lambda _request: stream(b""),
        lambda _request: stream(b"event: error\ndata: {}\n\n"),
        lambda _request: httpx2.Response(500, content=b"{}"),
        cut,
    ],
    ids=["garbage", "empty", "error event", "500", "cut"],
)
async def test_a_failing_warm_up_is_logged_and_startup_goes_on(monkeypatch, caplog, answer) -> None:
    monkeypatch.setattr(warm_up, "_answer", answer)
    with caplog.at_level(logging.WARNING, logger="switchboard.llm"):
        await service.import_provider()  # returns: startup goes on
    assert "llm.warm_up_failed" in caplog.text
