"""`[mcp]` settings: servers from config.toml and from a Claude-style JSON file,
${VAR} references, and bad config as one line naming the server and the key
(exit 2 from `switchboard run`, before anything is served)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.config import load_settings
from bot.errors import ConfigError
from bot.types import Role
from tests.cli.test_startup_errors import run, the_line


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def problem(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ=environ or {})
    return str(caught.value)


def test_servers_and_their_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCS_TOKEN", "secret-docs-token")
    settings = load_settings(
        write(
            tmp_path,
            """
[mcp]
inline_max_tools = 5
[mcp.servers.tickets]
command = "tickets-mcp"
args = ["--stdio"]
env = { TICKETS_TOKEN = "${DOCS_TOKEN}" }
min_role = "guest"
personas = ["default"]
effects = { search = "read" }
[mcp.servers.docs]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }
trusted_output = true
timeout_seconds = 5
""",
        ),
        environ={},
    )
    tickets, docs = settings.mcp.servers["tickets"], settings.mcp.servers["docs"]
    assert settings.mcp.inline_max_tools == 5
    assert (tickets.transport, tickets.min_role, tickets.timeout_seconds) == (
        "stdio",
        Role.GUEST,
        60,
    )
    assert (tickets.trusted_output, tickets.tools, tickets.exclude_tools) == (False, None, ())
    assert tickets.effects == {"search": "read"}
    assert (docs.transport, docs.min_role, docs.timeout_seconds) == ("http", Role.USER, 5)
    assert docs.headers == {"Authorization": "Bearer ${DOCS_TOKEN}"}  # expanded only at start
    assert docs.resolved().headers == {"Authorization": "Bearer secret-docs-token"}
    assert tickets.resolved().env == {"TICKETS_TOKEN": "secret-docs-token"}
    assert settings.mcp.secret_values() == ["secret-docs-token", "secret-docs-token"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[mcp.servers.tickets]\ncommand = "x"\nurl = "http://127.0.0.1:1/mcp"\n',
            "mcp.servers.tickets.url: give either command (stdio) or url (streamable HTTP), "
            "not both (got 'http://127.0.0.1:1/mcp')",
        ),
        (
            '[mcp.servers.tickets]\ncommand = "x"\nbogus = 1\n',
            "mcp.servers.tickets.bogus: unknown setting",
        ),
        (
            '[mcp.servers.tickets]\nmin_role = "admin"\n',
            "mcp.servers.tickets: needs command (a stdio server) or url (a streamable-HTTP server)",
        ),
        (
            '[mcp.servers.tickets]\nurl = "http://x/mcp"\nargs = ["a"]\n',
            "mcp.servers.tickets.args: goes with command (a stdio server)",
        ),
        (
            '[mcp.servers.docs]\nurl = "http://x/mcp"\n'
            'headers = { Authorization = "Bearer abc" }\n',
            "mcp.servers.docs.headers: Authorization: secrets are not written in the config "
            "file; give the value as ${ENV_VAR}",
        ),
        (
            '[mcp.servers.docs]\nurl = "http://x/mcp"\nheaders = { X-Team = "${NOT_SET_HERE}" }\n',
            "mcp.servers.docs.headers: X-Team: environment variable NOT_SET_HERE is not set",
        ),
        (
            '[mcp.servers.docs]\nurl = "ftp://x"\n',
            "mcp.servers.docs.url: must be an http:// or https:// URL (got 'ftp://x')",
        ),
        (
            '[mcp.servers."two words"]\ncommand = "x"\n',
            "mcp.servers: 'two words': a server's name is 1-48 letters, digits, '_', '.' or '-'",
        ),
        (
            '[mcp.servers.tickets]\ncommand = "x"\neffects = { search = "write" }\n',
            "mcp.servers.tickets.effects.search: Input should be 'read', 'private_write' or "
            "'external' (got 'write')",
        ),
    ],
)
def test_bad_config_names_the_server_and_the_key(tmp_path: Path, text: str, message: str):
    assert problem(tmp_path, text) == f"{tmp_path / 'config.toml'}: {message}"


def test_a_claude_style_file(tmp_path: Path):
    servers = {
        "mcpServers": {
            "github": {"command": "github-mcp", "args": ["stdio"], "env": {"LEVEL": "debug"}},
            "docs": {"type": "http", "url": "https://mcp.example.com/mcp"},
            "old": {"command": "old-mcp", "disabled": True},
        }
    }
    (tmp_path / "mcp.json").write_text(json.dumps(servers))
    settings = load_settings(
        write(
            tmp_path,
            f"""
[mcp]
config_file = "{tmp_path / "mcp.json"}"
[mcp.servers.github]   # policy for the file's server
min_role = "admin"
tools = ["search_issues"]
[mcp.servers.local]
command = "local-mcp"
""",
        ),
        environ={},
    )
    github = settings.mcp.servers["github"]
    assert (github.command, github.args, github.env) == (
        "github-mcp",
        ("stdio",),
        {"LEVEL": "debug"},
    )
    assert (github.min_role, github.tools) == (Role.ADMIN, ("search_issues",))
    assert settings.mcp.servers["docs"].url == "https://mcp.example.com/mcp"
    assert sorted(settings.mcp.servers) == ["docs", "github", "local"]  # "old" is disabled


@pytest.mark.parametrize(
    ("entries", "extra", "message"),
    [
        ({"github": {"command": "x"}}, '[mcp.servers.github]\ncommand = "y"\n', "is defined both"),
        ({"sse": {"type": "sse", "url": "http://x/sse"}}, "", "the SSE transport is not supported"),
        ({"x": {"command": "x", "alwaysAllow": []}}, "", "mcpServers.x.alwaysAllow: unknown"),
        ({"x": {"command": "x", "url": "http://x"}}, "", "mcpServers.x.url: give either"),
    ],
)
def test_a_bad_claude_style_file(tmp_path: Path, entries: dict, extra: str, message: str):
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": entries}))
    text = f'[mcp]\nconfig_file = "{tmp_path / "mcp.json"}"\n{extra}'
    found = problem(tmp_path, text)
    assert found.startswith(f"{tmp_path / 'config.toml'}: mcp: ") and message in found


def test_an_unreadable_claude_style_file(tmp_path: Path):
    (tmp_path / "mcp.json").write_text("{not json")
    found = problem(tmp_path, f'[mcp]\nconfig_file = "{tmp_path / "mcp.json"}"\n')
    assert "is not valid JSON" in found
    found = problem(tmp_path, f'[mcp]\nconfig_file = "{tmp_path / "missing.json"}"\n')
    assert "cannot read" in found and "missing.json" in found


@pytest.mark.e2e
async def test_a_persona_that_does_not_exist_stops_the_start(tmp_path: Path):
    status, stderr = await run(
        tmp_path,
        SWITCHBOARD__MCP__SERVERS__TICKETS__COMMAND='"tickets-mcp"',
        SWITCHBOARD__MCP__SERVERS__TICKETS__PERSONAS='["sales"]',
    )
    assert the_line(status, stderr) == (
        "switchboard: config error: mcp.servers.tickets.personas: no persona named 'sales' "
        "(the personas are: default)"
    )


@pytest.mark.e2e
async def test_both_transports_stop_the_start(tmp_path: Path):
    status, stderr = await run(
        tmp_path,
        SWITCHBOARD__MCP__SERVERS__TICKETS__COMMAND='"tickets-mcp"',
        SWITCHBOARD__MCP__SERVERS__TICKETS__URL='"http://127.0.0.1:1/mcp"',
    )
    line = the_line(status, stderr)
    assert line.startswith("switchboard: config error: environment (")
    assert "mcp.servers.tickets.url: give either command (stdio) or url" in line
