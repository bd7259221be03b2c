"""Logging in and out, and the stylesheet (the only thing served without a
credential besides the login page; neither carries data)."""

from __future__ import annotations

from aiohttp import web

from bot.web.admin.auth import COOKIE, Credential, clear_session_cookie, set_session_cookie
from bot.web.admin.render import SECURITY_HEADERS, stylesheet
from bot.web.admin.site import ACTOR, Site


async def login_form(site: Site, request: web.Request) -> web.StreamResponse:
    if site.gate.check(request) is not None:
        raise web.HTTPSeeOther("/admin")
    return site.render(request, None, "login.html", "login", error=None)


async def login(site: Site, request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    where = f"web {request.remote or '?'}"
    if site.gate.login_blocked():
        return site.render(
            request,
            None,
            "login.html",
            "login",
            429,
            error="Too many wrong tokens; try again in a few minutes.",
        )
    if not isinstance(token, str) or not token or not site.gate.token_ok(token):
        site.gate.login_failed()
        await site.deps.ops.audit.record(
            actor=ACTOR.handle, action="admin login", outcome="denied", where=where
        )
        return site.render(
            request, None, "login.html", "login", 401, error="That is not the admin token."
        )
    await site.deps.ops.audit.record(actor=ACTOR.handle, action="admin login", where=where)
    response = web.Response(status=303, headers={"Location": "/admin"})
    set_session_cookie(
        response, site.gate.new_session(), request.secure, int(site.gate.session_seconds)
    )
    response.headers.update(SECURITY_HEADERS)
    return response


async def logout(site: Site, request: web.Request, credential: Credential) -> web.StreamResponse:
    cookie = request.cookies.get(COOKIE)
    if cookie:
        site.gate.revoke(cookie)
    await site.deps.ops.audit.record(
        actor=ACTOR.handle, action="admin logout", where=f"web {request.remote or '?'}"
    )
    response = web.Response(status=303, headers={"Location": "/admin/login"})
    clear_session_cookie(response)
    return response


async def css(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=stylesheet(),
        content_type="text/css",
        headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
    )
