"""MCP through the real service (`switchboard run` as a subprocess, Slack in
HTTP mode against `FakeSlack`, the model at `FakeAnthropic`, the toolbox as
the service's own stdio subprocess): a call's result reaches the Slack reply;
the server sees none of the service's secrets; killed, it is started again
for the next call; a streamable-HTTP server that is down shows on /readyz and
/metrics but does not make the service unready; SIGTERM stops the server."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import BACKENDS, TEST_API_KEY, Database
from tests.fakes.anthropic import (
    FakeAnthropic,
    ScriptItem,
    last_user_text,
    text_reply,
    tool_call,
    tool_use_reply,
)
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.mcp_servers import calls, stdio_config
from tests.pipeline.test_crash_recovery import dm_event, replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env
from tests.web.scrape import readyz_until, scrape_until, value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
ADMIN_TOKEN = "admin-token-never-shown-0123456789"


def respond(body: dict[str, Any]) -> ScriptItem:
    last = body["messages"][-1]["content"]
    done = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if done:
        content = str(done[0]["content"])  # inside the untrusted-content markers
        return text_reply(f"Result: {content.split(chr(10), 1)[-1].rsplit(chr(10), 1)[0]}")
    text = last_user_text(body)
    if text.startswith("echo "):
        return tool_use_reply(tool_call("mcp__box__echo", {"text": text[5:]}))
    if text.startswith("environment"):
        return tool_use_reply(tool_call("mcp__box__environment"))
    return text_reply("?")


def mcp_env(log: Path, down_port: int) -> dict[str, str]:
    box = stdio_config(log, min_role="guest")
    return {
        "SWITCHBOARD__MCP__SERVERS__BOX__COMMAND": json.dumps(box["command"]),
        "SWITCHBOARD__MCP__SERVERS__BOX__ARGS": json.dumps(box["args"]),
        "SWITCHBOARD__MCP__SERVERS__BOX__MIN_ROLE": '"guest"',
        "SWITCHBOARD__MCP__SERVERS__DOWN__URL": json.dumps(f"http://127.0.0.1:{down_port}/mcp"),
        "SWITCHBOARD_ADMIN_TOKEN": ADMIN_TOKEN,
    }


@pytest.mark.parametrize("backend", BACKENDS)
async def test_mcp_tools_in_the_running_service(tmp_path: Path, backend: str) -> None:
    database = Database(backend, tmp_path)
    await database.create()
    try:
        await _conversation(tmp_path, database)
    finally:
        await database.drop()


async def _conversation(tmp_path: Path, database: Database) -> None:
    log = tmp_path / "calls.jsonl"
    async with (
        FakeAnthropic(api_key=TEST_API_KEY, responder=respond) as model,
        FakeSlack() as slack,
    ):
        port = free_port()
        env = service_env(database, model, slack, port, **mcp_env(log, free_port()))
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                ready = await readyz_until(http, service, 200, "ready with a server down")
                while ready["mcp"]["box"] != "up":  # the service answers before it connects
                    ready = await readyz_until(http, service, 200, "box connected")
                sender = SlackSender(http, [service.url])
                await sender.deliver(
                    dm_event("D1", "UALICE0001", "echo hello", "1700000001.000001")
                )
                await wait_for(lambda: len(replies_in(slack, "D1")) == 1, "the echo", service)
                await sender.deliver(
                    dm_event("D1", "UALICE0001", "environment", "1700000002.000001")
                )
                await wait_for(
                    lambda: len(replies_in(slack, "D1")) == 2, "the environment", service
                )
                seen = json.loads(replies_in(slack, "D1")[1].removeprefix("Result: "))
                os.kill(seen["pid"], signal.SIGKILL)  # the server dies between messages
                # (and the service notices before the next: a call already on its
                # way to the dead session fails, one made once it is down waits)
                await wait_for(
                    lambda: "mcp.down server=box" in "\n".join(service.logs),
                    "the service notices the server died",
                    service,
                )
                await sender.deliver(
                    dm_event("D1", "UALICE0001", "echo again", "1700000003.000001")
                )
                await wait_for(lambda: len(replies_in(slack, "D1")) == 3, "the reconnect", service)
                _, samples = await scrape_until(
                    http,
                    service,
                    lambda s: (
                        value(s, "switchboard_mcp_calls_total", server="box", outcome="ok") == 3
                    ),
                    "three MCP calls",
                )
                down = await readyz_until(http, service, 200, "still ready")
        finally:
            await service.stop()
        last_pid = calls(log)[-1]["pid"]
    replies = replies_in(slack, "D1")
    assert replies[0] == "Result: echo: hello"
    assert replies[2] == "Result: echo: again"
    assert ready["mcp"] == {"box": "up", "down": "down"} and ready["ready"] is True
    assert down["mcp"]["down"] == "down" and down["ready"] is True
    assert value(samples, "switchboard_mcp_up", server="box") == 1
    assert value(samples, "switchboard_mcp_up", server="down") == 0
    assert value(samples, "switchboard_mcp_call_seconds_count", server="box") == 3
    environ = seen["environ"]
    for secret in (TEST_API_KEY, BOT_TOKEN, SIGNING_SECRET, ADMIN_TOKEN, database.url):
        assert secret not in json.dumps(environ)
    assert not [name for name in environ if name.startswith(("SWITCHBOARD", "SLACK", "ANTHROPIC"))]
    assert len({c["pid"] for c in calls(log)}) == 2  # started again after the kill
    with pytest.raises(ProcessLookupError):
        os.kill(last_pid, 0)  # SIGTERM to the service stopped its server too
    log_text = "\n".join(service.logs)
    assert "mcp.down server=down" in log_text and "mcp.down server=box" in log_text
    assert ADMIN_TOKEN not in log_text and BOT_TOKEN not in log_text
