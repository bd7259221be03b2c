"""`[mcp]`: the Model Context Protocol servers whose tools the agent gets.

Servers are defined only here (and in the Claude-style JSON file `config_file`
names): no chat command, slash command or admin page adds or edits one. Each
`[mcp.servers.NAME]` either runs a stdio server (`command`, `args`, `env`,
`cwd`) or connects to a streamable-HTTP one (`url`, `headers`), and says who
gets its tools and how far they are trusted.

A value of `command`, `args`, `env`, `url` or `headers` may name environment variables,
``${VAR}`` (or ``${VAR:-default}``), so secrets stay out of the files; they are
checked when the settings load and expanded only when the server is started
(`McpServerSettings.resolved`), and their values join the log redaction.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from bot.config.sections import Section
from bot.types import Role

Effect = Literal["read", "private_write", "external"]

SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}")
"""A server's name: also its metric label and part of its tools' names."""
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_HEADER = re.compile(r"authorization|token|secret|key|password|cookie", re.IGNORECASE)
_JSON_KEYS = frozenset({"type", "command", "args", "env", "cwd", "url", "headers", "disabled"})
_TRANSPORT_KEYS = ("command", "args", "env", "cwd", "url", "headers")


class MissingVariable(ValueError):
    pass


def expand(value: str, environ: Mapping[str, str]) -> str:
    """`value` with each ``${VAR}`` / ``${VAR:-default}`` replaced; raises
    `MissingVariable` naming a variable that is not set (and has no default)."""

    def one(found: re.Match[str]) -> str:
        name, default = found.group(1), found.group(2)
        if name in environ and environ[name] != "":
            return environ[name]
        if default is not None:
            return default
        raise MissingVariable(f"environment variable {name} is not set")

    return _REFERENCE.sub(one, value)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A server's transport with every ``${VAR}`` expanded (`resolved`)."""

    command: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    url: str | None
    headers: dict[str, str]
    secrets: tuple[str, ...]
    """The values that came from environment variables (for log redaction)."""


class McpServerSettings(Section):
    """`[mcp.servers.NAME]`. The transport: `command` (stdio) or `url`
    (streamable HTTP). The policy: the rest."""

    command: str | None = None
    """stdio: the program to start (looked up in PATH)."""

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None:
            if not value.strip():
                raise ValueError("is empty")
            _check_references(value)
        return value

    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    """stdio: the server's environment beyond PATH, HOME, LANG and TMPDIR."""
    cwd: Path | None = None
    url: str | None = None
    """Streamable HTTP: the server's endpoint (http:// or https://)."""
    headers: dict[str, str] = Field(default_factory=dict)
    tools: tuple[str, ...] | None = None
    """Only these of the server's tools (its own names); omitted: all of them."""
    exclude_tools: tuple[str, ...] = ()
    min_role: Role = Role.USER
    """Who gets this server's tools (guests only with "guest")."""
    personas: tuple[str, ...] | None = None
    """Only in these personas; omitted: all of them."""
    timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    """A call longer than this fails (and is cancelled at the server)."""
    trusted_output: bool = False
    """True: the results are not treated as untrusted content (only for servers
    whose output you control)."""
    effects: dict[str, Effect] = Field(default_factory=dict)
    """A tool's effect by its own name, overriding its annotations
    (readOnlyHint → "read", otherwise "external")."""

    @field_validator("args", "env", "cwd")
    @classmethod
    def _stdio_only(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("command") is None:
            raise ValueError("goes with command (a stdio server)")
        _check_references(value)
        return value

    @field_validator("url")
    @classmethod
    def _one_transport(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if info.data.get("command") is not None:
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        if not value.startswith(("http://", "https://", "${")):
            raise ValueError("must be an http:// or https:// URL")
        _check_references(value)
        return value

    @field_validator("headers")
    @classmethod
    def _http_only(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if value and info.data.get("url") is None:
            raise ValueError("goes with url (a streamable-HTTP server)")
        for header, text in value.items():
            if _SECRET_HEADER.search(header) and not _REFERENCE.search(text):
                raise ValueError(
                    f"{header}: secrets are not written in the config file; "
                    "give the value as ${ENV_VAR}"
                )
        _check_references(value)
        return value

    @model_validator(mode="after")
    def _has_transport(self) -> McpServerSettings:
        if not self.has_transport:
            raise ValueError("needs command (a stdio server) or url (a streamable-HTTP server)")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def has_transport(self) -> bool:
        return self.command is not None or self.url is not None

    def resolved(self, environ: Mapping[str, str] | None = None) -> Resolved:
        env = os.environ if environ is None else environ
        secrets: list[str] = []

        def value(text: str) -> str:
            out = expand(text, env)
            if out != text:
                secrets.extend(
                    env[m.group(1)] for m in _REFERENCE.finditer(text) if m.group(1) in env
                )
            return out

        return Resolved(
            command=value(self.command) if self.command is not None else None,
            args=tuple(value(a) for a in self.args),
            env={k: value(v) for k, v in self.env.items()},
            url=value(self.url) if self.url is not None else None,
            headers={k: value(v) for k, v in self.headers.items()},
            secrets=tuple(s for s in secrets if s),
        )


class McpSettings(Section):
    config_file: Path | None = None
    """A Claude-style JSON file (``{"mcpServers": {...}}``) whose servers are
    added as they are; a `[mcp.servers.NAME]` of the same name without a
    transport adds its policy keys."""
    inline_max_tools: int = Field(default=20, ge=0, le=1000)
    """Up to this many MCP tools are sent to the model as definitions; beyond,
    none are, and the model finds them with `tool_search`."""
    servers: dict[str, McpServerSettings] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _with_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("config_file"):
            return data
        path = Path(str(data["config_file"])).expanduser()
        servers = dict(data.get("servers") or {})
        for name, entry in _read_claude_file(path).items():
            own = servers.get(name)
            if isinstance(own, dict) and any(k in own for k in _TRANSPORT_KEYS):
                raise ValueError(
                    f"server {name!r} is defined both here and in {path} "
                    "(here, give it only policy keys)"
                )
            servers[name] = {**entry, **(own if isinstance(own, dict) else {})}
        return {**data, "servers": servers}

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r}: a server's name is 1-48 letters, digits, '_', '.' or '-'"
                )
        return servers

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values of the environment variables the servers name (log redaction)."""
        return [s for server in self.servers.values() for s in server.resolved(environ).secrets]


def _check_references(value: Any) -> None:
    """Every ``${VAR}`` in `value` (a string, or the values of a list or table)
    names a variable that is set (or has a default)."""
    if isinstance(value, str):
        expand(value, os.environ)
    elif isinstance(value, dict):
        for key, text in value.items():
            try:
                expand(str(text), os.environ)
            except MissingVariable as exc:
                raise ValueError(f"{key}: {exc}") from None
    elif isinstance(value, tuple | list):
        for text in value:
            expand(str(text), os.environ)


def _read_claude_file(path: Path) -> dict[str, dict[str, Any]]:
    """The servers of a Claude Desktop / Claude Code style file, as our keys."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"config_file: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config_file: {path} is not valid JSON: {exc}") from None
    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f'config_file: {path} has no "mcpServers" object')
    servers: dict[str, dict[str, Any]] = {}
    for name, entry in entries.items():
        where = f"{path}: mcpServers.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object")
        unknown = sorted(set(entry) - _JSON_KEYS)
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: unknown setting")
        if entry.get("disabled") is True:
            continue
        kind = entry.get("type")
        if kind == "sse":
            raise ValueError(
                f"{where}.type: the SSE transport is not supported (use streamable HTTP)"
            )
        if kind not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
            raise ValueError(f"{where}.type: unknown transport {kind!r}")
        found = {k: v for k, v in entry.items() if k in _TRANSPORT_KEYS}
        try:
            McpServerSettings.model_validate(found)
        except ValidationError as exc:
            error = exc.errors()[0]
            key = ".".join(str(p) for p in error["loc"])
            problem = error["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}{'.' + key if key else ''}: {problem}") from None
        servers[name] = found
    return servers
