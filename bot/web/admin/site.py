"""The dashboard as a whole: what it reads and changes (`AdminDeps`), the gate
in front of every page, and the helpers the views share (rendering with the
navigation and the form's CSRF token, 400/404 pages, reading a form)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web
from sqlalchemy.exc import SQLAlchemyError

from bot.accounts.ops import Actor, AdminOps
from bot.mcp.status import ServerStatus
from bot.scheduling.jobs import Jobs
from bot.store import Store
from bot.types import Role
from bot.web.admin.auth import LOGIN_PATH, Credential, Gate, unauthorized, wants_html
from bot.web.admin.csrf import csrf_token, require_csrf
from bot.web.admin.render import environment, page

log = logging.getLogger("switchboard.web")

Backlog = Callable[[], Awaitable[tuple[int, datetime | None]]]
"""Open inbox messages and when the oldest was accepted (`Inbox.backlog`)."""

ACTOR = Actor("admin-web", Role.OWNER, None, "web")
"""Who changes things from the dashboard, in the audit log: the token's holder
may do what an owner (or the CLI operator) may."""

NOTICES = {
    "budget": "Budget saved.",
    "role": "Role changed.",
    "pause": "Job paused.",
    "resume": "Job resumed.",
    "remove": "Job deleted.",
}


@dataclass(frozen=True, slots=True)
class AdminDeps:
    store: Store
    ops: AdminOps
    """Budgets, the directory, usage and the audit log, as the slash commands use them."""
    jobs: Jobs
    backlog: Backlog | None = None
    mcp: Callable[[], Sequence[ServerStatus]] | None = None
    """The MCP servers and their state (None: none configured)."""


View = Callable[["Site", web.Request, Credential], Awaitable[web.StreamResponse]]


class Site:
    def __init__(self, deps: AdminDeps, gate: Gate) -> None:
        self.deps = deps
        self.gate = gate
        self.env = environment()

    def guarded(
        self, view: View, *, changes: bool = False
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """`view` behind the gate: no credential → 303 to the login page (a
        browser asking for a page) or 401; `changes` (a POST) also needs the
        session's CSRF token (403 without it) before the view runs."""

        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                credential = await self.gate.check(request)
            except SQLAlchemyError as exc:  # whether the session was logged out
                return self.unavailable(request, None, exc)
            if credential is None:
                if wants_html(request):
                    raise web.HTTPSeeOther(LOGIN_PATH)
                raise unauthorized()
            if changes:
                await require_csrf(request, self.gate.signer, credential)
            try:
                return await view(self, request, credential)
            except SQLAlchemyError as exc:
                return self.unavailable(request, credential, exc)

        return handler

    def unavailable(
        self, request: web.Request, credential: Credential | None, exc: SQLAlchemyError
    ) -> web.Response:
        """503: the database failed (logged with the error's type, never its SQL)."""
        log.warning(
            "admin.database_error method=%s path=%s error=%s",
            request.method,
            request.path,
            type(exc).__name__,
        )
        return self.problem(
            request,
            credential,
            503,
            f"The database did not answer ({type(exc).__name__}); try again shortly.",
        )

    def render(
        self,
        request: web.Request,
        credential: Credential | None,
        template: str,
        section: str,
        status: int = 200,
        **context: Any,
    ) -> web.Response:
        notice = NOTICES.get(request.query.get("notice", ""))
        return page(
            self.env,
            template,
            status,
            section=section,
            session=credential is not None and credential.kind == "session",
            csrf=csrf_token(self.gate.signer, credential) if credential else "",
            notice=notice,
            **context,
        )

    def problem(
        self, request: web.Request, credential: Credential | None, status: int, message: str
    ) -> web.Response:
        """A page saying what was wrong (400 bad input, 403 refused, 404 unknown,
        503 the database failed)."""
        titles = {400: "Bad input", 403: "Not allowed", 404: "Not found", 503: "Unavailable"}
        return self.render(
            request,
            credential,
            "error.html",
            "",
            status,
            title=titles.get(status, "Error"),
            message=message,
        )


async def form_text(request: web.Request, name: str, max_chars: int = 200) -> str:
    """A text field of the posted form; ValueError when absent or too long (→ 400)."""
    form = await request.post()
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"the form field {name!r} is missing")
    if len(value) > max_chars:
        raise ValueError(f"the form field {name!r} is too long")
    return value.strip()


def see_other(path: str, notice: str | None = None) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(path + (f"?notice={notice}" if notice else ""))
