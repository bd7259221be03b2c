"""The audit log, newest first, filtered by actor, action and target (each a
"contains" match) from the query string: /admin/audit?actor=admin-web&action=budget."""

from __future__ import annotations

from aiohttp import web

from bot.web.admin.auth import Credential
from bot.web.admin.site import Site

LIMIT = 200
FILTERS = ("actor", "action", "target")


async def audit(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    filters = {name: request.query.get(name, "").strip()[:200] for name in FILTERS}
    entries = await site.deps.ops.audit.recent(
        LIMIT, **{name: value or None for name, value in filters.items()}
    )
    return site.render(request, credential, "audit.html", "audit", entries=entries, filters=filters)
