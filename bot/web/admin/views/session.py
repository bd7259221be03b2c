"""Logging in and out, and the stylesheet (the only thing served without a
credential besides the login page; neither carries data)."""

from __future__ import annotations

from aiohttp import web
from sqlalchemy.exc import SQLAlchemyError

from bot.web.admin.auth import Credential, clear_session_cookie, set_session_cookie
from bot.web.admin.render import SECURITY_HEADERS, stylesheet
from bot.web.admin.site import ACTOR, Site


async def login_form(site: Site, request: web.Request) -> web.StreamResponse:
    try:
        credential = await site.gate.check(request)
    except SQLAlchemyError:  # whether its session was logged out: let it log in again
        credential = None
    if credential is not None:
        raise web.HTTPSeeOther("/admin")
    return site.render(request, None, "login.html", "login", error=None)


async def login(site: Site, request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    gate = site.gate
    address = gate.address(request)
    where = f"web {address}"
    if gate.lockout.blocked(address):
        return site.render(
            request,
            None,
            "login.html",
            "login",
            429,
            error="Too many wrong tokens from your address; try again in a few minutes.",
        )
    if not isinstance(token, str) or not token or not gate.signer.token_ok(token):
        gate.lockout.failed(address)
        await site.deps.ops.audit.record(
            actor=ACTOR.handle, action="admin login", outcome="denied", where=where
        )
        return site.render(
            request, None, "login.html", "login", 401, error="That is not the admin token."
        )
    gate.lockout.succeeded(address)
    await site.deps.ops.audit.record(actor=ACTOR.handle, action="admin login", where=where)
    response = web.Response(status=303, headers={"Location": "/admin"})
    set_session_cookie(
        response,
        gate.signer.new_session(),
        gate.secure_cookie(request),
        int(gate.signer.session_seconds),
    )
    response.headers.update(SECURITY_HEADERS)
    return response


async def logout(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    """End the session on every instance; when the database cannot record
    that, the session goes on (503, the cookie kept: log out again)."""
    await site.gate.log_out(request)  # a database error: `Site.guarded`'s 503
    await site.deps.ops.audit.record(
        actor=ACTOR.handle, action="admin logout", where=f"web {site.gate.address(request)}"
    )
    response = web.Response(status=303, headers={"Location": "/admin/login"})
    clear_session_cookie(response, site.gate.secure_cookie(request))
    return response


async def css(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=stylesheet(),
        content_type="text/css",
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )
