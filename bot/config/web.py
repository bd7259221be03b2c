"""`[web]` and `[web.search]`: the agent's `web_fetch` and `web_search` tools.

Fetches pass an SSRF guard (`bot.tools.web.guard`): only http and https, only
the ports in `ports`, never an address that is loopback, private, link-local,
unique-local, shared, multicast or unspecified, except the `host:port` pairs
in `allow_hosts`. The search backend's own URL is the operator's setting and
does not pass that guard.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from bot.config.sections import Section
from bot.types import Role

BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]@]+)):(?P<port>\d{1,5})")


def host_port(entry: str) -> tuple[str, int]:
    """`"host:port"` (`"[v6]:port"`) → the lower-case host without a final dot,
    and the port; `ValueError` saying what is wrong."""
    found = _HOST_PORT.fullmatch(entry.strip())
    if found is None:
        raise ValueError(f'"{entry}" is not of the form "host:port" (IPv6: "[addr]:port")')
    port = int(found["port"])
    if not 0 < port < 65536:
        raise ValueError(f'"{entry}": port {port} is out of range')
    host = (found["v6"] or found["host"]).lower().rstrip(".")
    return host, port


class WebSearchSettings(Section):
    backend: Literal["none", "searxng", "brave", "anthropic"] = "none"
    """Where `web_search` looks: a self-hosted SearXNG (`url`, no key), the Brave
    Search API (key from the env var named by `api_key_env`), or the model
    provider's own server-side search (Anthropic; billed per search). "none":
    the tool is not offered."""
    url: str | None = None
    """SearXNG: its base URL (the JSON API must be enabled); Brave: the API's
    address (default: Brave's own)."""
    api_key_env: str = "BRAVE_SEARCH_API_KEY"
    """Brave: the environment variable holding the API key."""
    max_results: int = Field(default=5, ge=1, le=20)
    """Results per search unless the model asks for fewer."""
    max_uses: int = Field(default=5, ge=1, le=50)
    """Anthropic: searches the model may run within one of its calls."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=120)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.fullmatch(value):
            raise ValueError("must be the name of an environment variable (not the key itself)")
        return value

    @model_validator(mode="after")
    def _backend_needs(self) -> WebSearchSettings:
        if self.backend == "searxng" and self.url is None:
            raise ValueError('url is required with backend = "searxng" (the SearXNG base URL)')
        return self


class WebSettings(Section):
    fetch: bool = True
    """Offer `web_fetch` (from `min_role` up, to personas whose tools include "web")."""
    min_role: Role = Role.USER
    """The lowest role offered `web_fetch` and `web_search`."""
    allow_hosts: tuple[str, ...] = ()
    """`"host:port"` pairs fetched whatever their address (an intranet wiki):
    the one way to reach a private or loopback address."""
    ports: tuple[int, ...] = (80, 443)
    """The ports other hosts may be fetched on."""
    max_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    """At most this much of a page is read; a longer page is cut there."""
    timeout_seconds: float = Field(default=15.0, gt=0, le=300)
    """One fetch in all: connecting, every redirect and the body."""
    max_redirects: int = Field(default=5, ge=0, le=20)
    max_chars: int = Field(default=100_000, ge=1000)
    """At most this much extracted text is kept of one fetch (the model's
    `max_chars` may ask for less; over `[agent] tool_result_max_chars` it is
    stored and shown in part, like any tool's result)."""
    user_agent: str = "Switchboard/0.1 (web_fetch)"
    search: WebSearchSettings = WebSearchSettings()

    @field_validator("allow_hosts")
    @classmethod
    def _pairs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            host_port(entry)
        return value

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for port in value:
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is out of range")
        return value

    def allowed_pairs(self) -> frozenset[tuple[str, int]]:
        return frozenset(host_port(entry) for entry in self.allow_hosts)
