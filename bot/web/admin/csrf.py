"""CSRF protection of the dashboard's forms.

Every state-changing form (budget, role, job actions, logout) carries a hidden
`csrf` field: an HMAC of the session's nonce under the token's key
(`Signer.mac`), so it is tied to one login and unknowable to another site. A
POST from a session whose `csrf` field is missing or wrong gets 403 before
anything changes. The cookie is SameSite=Strict as well (a second line).

Requests authenticated with `Authorization: Bearer` are exempt: a browser
never adds that header on its own, so another site cannot make a victim's
browser send one (no ambient authority), and a script holding the token could
read any CSRF token anyway. The login form itself carries none: posting it
needs the token, which is what a forger lacks.
"""

from __future__ import annotations

from aiohttp import web

from bot.web.admin.auth import Credential, Signer, same

FIELD = "csrf"


def csrf_token(signer: Signer, credential: Credential) -> str:
    """The value this session's forms carry (empty for bearer requests)."""
    return signer.mac("csrf", credential.nonce) if credential.kind == "session" else ""


def csrf_ok(signer: Signer, credential: Credential, candidate: str | None) -> bool:
    if credential.kind == "bearer":
        return True
    if not credential.nonce or not candidate:
        return False
    return same(candidate, csrf_token(signer, credential))


async def require_csrf(request: web.Request, signer: Signer, credential: Credential) -> None:
    """Raise 403 unless the posted form carries this session's CSRF token."""
    form = await request.post()
    value = form.get(FIELD)
    if not csrf_ok(signer, credential, value if isinstance(value, str) else None):
        raise web.HTTPForbidden(text="403: missing or wrong CSRF token; reload the page\n")
