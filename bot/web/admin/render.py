"""Rendering the dashboard's pages: one Jinja2 environment over the templates
shipped in this package (autoescape on for everything), and the headers every
admin response carries (no caching, no framing, a strict CSP: no scripts at all,
styles and images only from here)."""

from __future__ import annotations

import json
from datetime import datetime
from importlib import resources
from typing import Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined

from bot.web.admin.charts import short

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}

NAV = (
    ("overview", "/admin", "Overview"),
    ("users", "/admin/users", "Users"),
    ("runs", "/admin/runs", "Runs"),
    ("jobs", "/admin/jobs", "Jobs"),
    ("audit", "/admin/audit", "Audit log"),
)


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def _details(value: object) -> str:
    return "" if not value else json.dumps(value, sort_keys=True, ensure_ascii=False)


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("bot.web.admin", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["short"] = short
    env.filters["details"] = _details
    env.globals["nav"] = NAV
    return env


def stylesheet() -> bytes:
    return resources.files("bot.web.admin").joinpath("static/admin.css").read_bytes()


def page(env: Environment, template: str, status: int = 200, **context: Any) -> web.Response:
    body = env.get_template(template).render(**context)
    response = web.Response(text=body, status=status, content_type="text/html", charset="utf-8")
    response.headers.update(SECURITY_HEADERS)
    return response
