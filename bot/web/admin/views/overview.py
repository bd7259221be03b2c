"""The overview: messages and tokens per day (SVG charts), usage and cost this
month with the top users and per model (as config names it: its provider
too), the inbox depth, recent delivery failures and the MCP servers with
their state."""

from __future__ import annotations

from aiohttp import web

from bot.types import utcnow
from bot.web.admin.auth import Credential
from bot.web.admin.charts import bar_chart
from bot.web.admin.data import daily_activity, delivery_failures
from bot.web.admin.site import Site

DAYS = 14


async def overview(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    deps = site.deps
    now = utcnow()
    days = await daily_activity(deps.store, DAYS, now)
    report = await deps.ops.usage.report(top=5)
    top = []
    for line in report.top_users:
        person = await deps.ops.directory.get(int(line.key))
        top.append((person.label if person else f"#{line.key} (deleted)", line))
    failures = await delivery_failures(deps.store, now=now)
    inbox: tuple[int, float | None] | None = None
    if deps.backlog is not None:
        pending, oldest = await deps.backlog()
        inbox = (pending, None if oldest is None else (now - oldest).total_seconds())
    servers = list(deps.mcp()) if deps.mcp is not None else None
    labels = [f"{d.day:%m-%d}" for d in days]
    return site.render(
        request,
        credential,
        "overview.html",
        "overview",
        days=days,
        messages_chart=bar_chart(
            f"Messages per day (last {DAYS} days, UTC)",
            labels,
            [d.messages for d in days],
            css_class="bars messages",
        ),
        tokens_chart=bar_chart(
            f"Tokens per day (last {DAYS} days, UTC)",
            labels,
            [d.tokens for d in days],
            css_class="bars tokens",
        ),
        messages_total=sum(d.messages for d in days),
        tokens_total=sum(d.tokens for d in days),
        report=report,
        top=top,
        failures=failures,
        inbox=inbox,
        servers=servers,
    )
