"""The admin dashboard at `/admin`, served by the service's web server only
when `SWITCHBOARD_ADMIN_TOKEN` is set (otherwise no `/admin` route exists: 404).

Pages (server-rendered Jinja2, no JavaScript): overview, users (budget and
role forms), runs and a run's trace, scheduled jobs (pause/resume/delete) and
the audit log. Authentication is in `auth` (bearer token or a login session
cookie), CSRF protection of the forms in `csrf`; every change goes through the
same operations as the slash commands and CLI and is audited with the actor
"admin-web", where "web".
"""

from __future__ import annotations

import logging

from aiohttp import web

from bot.ports import Route
from bot.web.admin.auth import Gate, Signer
from bot.web.admin.revoked import Revocations
from bot.web.admin.site import AdminDeps, Site
from bot.web.admin.views import audit, jobs, overview, runs, session, users

__all__ = ["AdminDeps", "admin_routes"]

log = logging.getLogger("switchboard.web")
MIN_TOKEN_CHARS = 24


def admin_routes(deps: AdminDeps, token: str, *, trust_proxy: bool = False) -> list[Route]:
    """The dashboard's routes; `trust_proxy` (`[server] trust_proxy`): behind a
    TLS-terminating proxy whose X-Forwarded-For is believed (`bot.web.clients`)."""
    if len(token) < MIN_TOKEN_CHARS:
        log.warning(
            "admin.weak_token: SWITCHBOARD_ADMIN_TOKEN has fewer than %d characters; "
            "use a long random value (e.g. openssl rand -hex 24)",
            MIN_TOKEN_CHARS,
        )
    gate = Gate(Signer(token), Revocations(deps.store), trust_proxy=trust_proxy)
    site = Site(deps, gate)
    guarded = site.guarded

    async def login_form(request: web.Request) -> web.StreamResponse:
        return await session.login_form(site, request)

    async def login(request: web.Request) -> web.StreamResponse:
        return await session.login(site, request)

    return [
        Route("GET", "/admin/login", login_form),
        Route("POST", "/admin/login", login),
        Route("POST", "/admin/logout", guarded(session.logout, changes=True)),
        Route("GET", "/admin/static/admin.css", session.css),
        Route("GET", "/admin", guarded(overview.overview)),
        Route("GET", "/admin/", guarded(overview.overview)),
        Route("GET", "/admin/users", guarded(users.users)),
        Route(
            "POST",
            r"/admin/users/{user_id:\d{1,18}}/budget",
            guarded(users.set_budget, changes=True),
        ),
        Route(
            "POST", r"/admin/users/{user_id:\d{1,18}}/role", guarded(users.set_role, changes=True)
        ),
        Route("GET", "/admin/runs", guarded(runs.runs)),
        Route("GET", "/admin/runs/{run_id}", guarded(runs.trace)),
        Route("GET", "/admin/jobs", guarded(jobs.jobs)),
        Route(
            "POST",
            r"/admin/jobs/{job_id:\d{1,18}}/{action:[a-z]+}",
            guarded(jobs.change, changes=True),
        ),
        Route("GET", "/admin/audit", guarded(audit.audit)),
    ]
