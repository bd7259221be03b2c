"""One MCP server's session (`bot.mcp.link.ServerLink`) against the real
toolbox server, as a stdio subprocess and over streamable HTTP on 127.0.0.1:
calls, a hung call cancelled at the server, a server that dies in the middle
of a call (the call fails, the next one reconnects), a server down at start
(one WARNING, one INFO when back), list_changed, garbage on stdout, stderr in
the log, and a stop that leaves no process behind."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import McpServerSettings
from bot.errors import ToolFailed
from bot.mcp.link import CallTimeout, ServerLink, Unavailable
from tests.mcp_servers import HttpToolbox, calls, stdio_config
from tests.service_rig import free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
MCP = "switchboard.mcp"


def settings(data: dict[str, Any]) -> McpServerSettings:
    return McpServerSettings.model_validate(data)


def lines(caplog: pytest.LogCaptureFixture, level: int, prefix: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == MCP and r.levelno == level and r.getMessage().startswith(prefix)
    ]


@pytest.fixture(params=["stdio", "http"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """(config, log, http server or None) of the toolbox over each transport."""
    log = tmp_path / "calls.jsonl"
    if request.param == "stdio":
        yield settings(stdio_config(log)), log, None
        return
    async with HttpToolbox(free_port(), log) as http:
        yield settings(http.config()), log, http


async def open_link(config: McpServerSettings, **options: Any) -> ServerLink:
    link = ServerLink("box", config, retry=(0.05, 0.5), **options)
    link.start()
    assert await link.wait_up(30), link.last_error
    return link


async def test_a_call_its_result_and_a_tool_added_later(served: Any) -> None:
    config, log, _ = served
    seen: list[list[str]] = []
    link = await open_link(config, on_tools=lambda it: seen.append([t.name for t in it.listed]))
    try:
        result = await link.call("echo", {"text": "hi"}, 10)
        assert result.content[0].text == "echo: hi"  # type: ignore[union-attr]
        assert "late_tool" not in seen[-1]
        await link.call("add_tool", {}, 10)
        await wait_until(lambda: "late_tool" in seen[-1])  # listed again on list_changed
        answered = await link.call("late_tool", {"text": "x"}, 10)
        assert answered.content[0].text == "late_tool answered x"  # type: ignore[union-attr]
    finally:
        await link.close()
    assert [c["tool"] for c in calls(log)] == ["echo", "add_tool", "late_tool"]


async def test_a_hung_call_times_out_and_is_cancelled_at_the_server(served: Any) -> None:
    config, log, _ = served
    link = await open_link(config)
    try:
        with pytest.raises(CallTimeout, match=r"timed out after 0\.5 s"):
            await link.call("hang", {}, 0.5)
        await wait_until(lambda: {"cancelled": "hang"} in calls(log))  # the server heard
        assert (await link.call("echo", {"text": "still"}, 10)).is_error is False
    finally:
        await link.close()
    assert link.connects == 1  # the session survived the timeout


@pytest.mark.slow
async def test_a_server_dying_mid_call_fails_the_call_then_comes_back(
    served: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config, log, http = served
    caplog.set_level(logging.DEBUG, logger=MCP)
    link = await open_link(config)
    try:
        with pytest.raises(ToolFailed) as failed:
            await link.call("die", {}, 10)
        assert not isinstance(failed.value, CallTimeout)
        if http is not None:  # the HTTP server is not restarted for us
            await http.wait_exited()
            await wait_until(lambda: link.state == "down")
            await http.start()
        result = await link.call("echo", {"text": "again"}, 20)  # waits for the reconnect
        assert result.content[0].text == "echo: again"  # type: ignore[union-attr]
    finally:
        await link.close()
    pids = [c["pid"] for c in calls(log) if "tool" in c]
    assert len(set(pids)) == 2  # a new server process answered
    assert len(lines(caplog, logging.WARNING, "mcp.down server=box")) == 1
    assert len(lines(caplog, logging.INFO, "mcp.up server=box: connected again")) == 1


async def test_a_server_down_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=MCP)
    http = HttpToolbox(free_port(), tmp_path / "calls.jsonl")
    link = ServerLink("web", settings(http.config()), retry=(0.05, 0.2))
    link.start()
    try:
        await wait_until(lambda: len(lines(caplog, logging.DEBUG, "mcp.reconnecting")) >= 3)
        assert link.state == "down" and "connect" in (link.last_error or "").lower()
        with pytest.raises(Unavailable, match=r"MCP server web is not connected .*0.2 s"):
            await link.call("echo", {"text": "early"}, 0.2)
        waiting = asyncio.create_task(link.call("echo", {"text": "patient"}, 30))
        await http.start()
        result = await waiting  # made while down: answered once the server is up
        assert result.content[0].text == "echo: patient"  # type: ignore[union-attr]
    finally:
        await link.close()
        await http.__aexit__()
    (warning,) = lines(caplog, logging.WARNING, "mcp.")
    assert warning.startswith("mcp.down server=web: ") and "connect" in warning.lower()
    assert len(lines(caplog, logging.INFO, "mcp.up server=web")) == 1
    assert [c["args"]["text"] for c in calls(tmp_path / "calls.jsonl")] == ["patient"]


async def test_garbage_on_stdout_and_a_noisy_stderr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=MCP)
    link = await open_link(settings(stdio_config(tmp_path / "calls.jsonl")))
    try:
        assert (await link.call("babble", {}, 10)).content[0].text == "babbled"  # type: ignore[union-attr]
        assert (await link.call("shout", {}, 10)).content[0].text == "shouted"  # type: ignore[union-attr]
        await wait_until(lambda: bool(lines(caplog, logging.DEBUG, "mcp.stderr server=box: noise")))
    finally:
        await link.close()
    assert link.connects == 1  # neither ended the session
    stderr = lines(caplog, logging.DEBUG, "mcp.stderr server=box: ")
    assert "mcp.stderr server=box: toolbox: serving on stdio" in stderr
    assert len(stderr) <= 21  # rate-limited: 20 lines a window, then a count
    assert any(line.endswith("more lines not logged") for line in stderr)


async def test_closing_stops_the_server_process(tmp_path: Path) -> None:
    link = await open_link(settings(stdio_config(tmp_path / "calls.jsonl")))
    result = await link.call("environment", {}, 10)
    pid = json.loads(result.content[0].text)["pid"]  # type: ignore[union-attr]
    waiting = asyncio.create_task(link.call("hang", {}, 30))
    await wait_until(lambda: any(c.get("tool") == "hang" for c in calls(tmp_path / "calls.jsonl")))
    await link.close()
    with pytest.raises(ToolFailed):
        await waiting  # a call under way when it stopped fails, it does not hang
    assert link.state == "stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_what_a_link_reports_names_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOX_TOKEN", "tok-0123456789")
    config = settings(
        {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${BOX_TOKEN}"}}
    )
    link = ServerLink("box", config)
    assert link.redact("refused Bearer tok-0123456789") == "refused Bearer [redacted]"
    link._went_down("401 for tok-0123456789")
    assert link.last_error == "401 for [redacted]"
