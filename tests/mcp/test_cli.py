"""`switchboard mcp list` and `switchboard mcp call`, the real command against
the toolbox server (stdio) and a streamable-HTTP address nothing listens on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_e2e_chat import run_cli
from tests.mcp_servers import calls, stdio_config
from tests.service_rig import free_port

pytestmark = pytest.mark.e2e


def config(tmp_path: Path, log: Path) -> dict[str, str]:
    box = stdio_config(log)
    down = f"http://127.0.0.1:{free_port()}/mcp"
    return {
        "SWITCHBOARD__MCP__SERVERS__BOX__COMMAND": json.dumps(box["command"]),
        "SWITCHBOARD__MCP__SERVERS__BOX__ARGS": json.dumps(box["args"]),
        "SWITCHBOARD__MCP__SERVERS__BOX__EXCLUDE_TOOLS": '["die"]',
        "SWITCHBOARD__MCP__SERVERS__DOWN__URL": json.dumps(down),
    }


def test_list_shows_each_server_up_or_down_and_what_it_offers(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    result = run_cli(["mcp", "list"], env=config(tmp_path, log), api_key=None)
    assert result.returncode == 1, result.stderr  # a server is down
    lines = result.stdout.splitlines()
    assert lines[0] == "box (stdio): up, 11 tools offered"
    offered = [line.split()[0] for line in lines[1:12]]
    assert "mcp__box__echo" in offered and "mcp__box__die" not in offered
    echo = next(line for line in lines if line.split()[0] == "mcp__box__echo")
    assert echo.split()[1] == "read" and echo.endswith("Echo the text back.")
    ticket = next(line for line in lines if line.split()[0] == "mcp__box__create_ticket")
    assert ticket.split()[1] == "external"
    (down,) = [line for line in lines if line.startswith("down ")]
    assert down.startswith("down (http): down, ") and "connect" in down.lower()
    assert calls(log) == []  # listing calls nothing


def test_call_a_tool_by_hand(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    env = config(tmp_path, log)
    result = run_cli(["mcp", "call", "box", "echo", '{"text": "by hand"}'], env=env, api_key=None)
    assert (result.returncode, result.stdout) == (0, "echo: by hand\n"), result.stderr
    result = run_cli(
        ["mcp", "call", "box", "mcp__box__echo", '{"text": "2"}'], env=env, api_key=None
    )
    assert result.stdout == "echo: 2\n"
    failed = run_cli(["mcp", "call", "box", "fail"], env=env, api_key=None)
    assert failed.returncode == 1
    assert failed.stderr.strip() == "error: the tracker refused: project TEAM is archived"
    unknown = run_cli(["mcp", "call", "nobody", "echo"], env=env, api_key=None)
    assert unknown.returncode == 1
    assert "no MCP server named 'nobody' (box, down)" in unknown.stderr
    bad = run_cli(["mcp", "call", "box", "echo", "[1]"], env=env, api_key=None)
    assert bad.returncode == 1 and "must be a JSON object" in bad.stderr
    assert [c["args"] for c in calls(log)] == [{"text": "by hand"}, {"text": "2"}, {}]
