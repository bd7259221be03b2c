"""Who may see `/admin`: the holder of `SWITCHBOARD_ADMIN_TOKEN`.

Two ways in:
- `Authorization: Bearer <token>` on every request (scripts, curl). A request
  carrying a wrong or malformed Authorization header gets 401, whatever else
  it carries.
- The login form: posting the token sets a session cookie (HttpOnly,
  SameSite=Strict, Path=/admin; Secure when the request came over TLS or
  `[server] trust_proxy` is on). Its value is `<expiry>.<nonce>.<mac>`, the
  mac an HMAC-SHA256 of expiry and nonce under a key derived from the token
  (`Signer`), so a session is valid on every instance that has the same
  token, ends at its expiry (`SESSION_HOURS`), and ends for all at once when
  the token changes. Logout ends it on every instance sharing the database
  (`bot.web.admin.revoked`: at once here, within two seconds elsewhere) and
  clears the cookie.

Wrong tokens through the form lock the form for their source address only
(`bot.web.admin.lockout`; the address as `bot.web.clients` finds it, which
believes `X-Forwarded-For` only with `trust_proxy`). Without credentials a
browser page request (GET asking for HTML) is sent to the login page (303);
anything else gets 401. Every comparison of a secret value is
`hmac.compare_digest`. The token and cookies are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from bot.web.admin.lockout import Lockout
from bot.web.admin.revoked import Revocations
from bot.web.clients import client_address, forwarded_https

log = logging.getLogger("switchboard.web")

COOKIE = "switchboard_admin"
SESSION_HOURS = 12
LOGIN_PATH = "/admin/login"


@dataclass(frozen=True, slots=True)
class Credential:
    """How a request proved it holds the token: "bearer", or a login "session"
    (then `nonce` names it, for its CSRF token and logout)."""

    kind: str
    nonce: str = ""


@dataclass(frozen=True, slots=True)
class Session:
    """A validly signed, unexpired session cookie."""

    nonce: str
    expiry: int
    """When it expires (epoch seconds)."""


def same(a: str, b: str) -> bool:
    """Constant-time equality of two strings (any characters)."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


class Signer:
    """The token, and what is signed with a key derived from it: session
    cookies and CSRF tokens."""

    def __init__(
        self,
        token: str,
        session_seconds: float = SESSION_HOURS * 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not token:
            raise ValueError("the admin token is empty")
        self._token = token
        self._clock = clock
        self._key = hashlib.sha256(b"switchboard-admin-session\0" + token.encode()).digest()
        self.session_seconds = session_seconds

    def token_ok(self, candidate: str) -> bool:
        return same(candidate, self._token)

    def new_session(self) -> str:
        """A fresh cookie value."""
        expiry = str(int(self._clock() + self.session_seconds))
        nonce = secrets.token_urlsafe(18)
        return f"{expiry}.{nonce}.{self.mac('session', expiry, nonce)}"

    def session(self, value: str) -> Session | None:
        """The session when `value` is a cookie value signed with this token
        and not expired (whether it was logged out is `Revocations`'); else None."""
        parts = value.split(".")
        if len(parts) != 3:
            return None
        expiry, nonce, mac = parts
        if not same(mac, self.mac("session", expiry, nonce)):
            return None
        if not expiry.isdigit() or int(expiry) <= self._clock():
            return None
        return Session(nonce, int(expiry))

    def mac(self, purpose: str, *parts: str) -> str:
        """HMAC-SHA256 (hex) of `parts` for `purpose` under the token's key."""
        message = "\0".join((purpose, *parts)).encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


class Gate:
    """The checks in front of the dashboard: credentials, logout, the login
    form's lockout, and what a proxy in front may tell (`trust_proxy`)."""

    def __init__(
        self,
        signer: Signer,
        revocations: Revocations,
        *,
        trust_proxy: bool = False,
        lockout: Lockout | None = None,
    ) -> None:
        self.signer = signer
        self.revocations = revocations
        self.trust_proxy = trust_proxy
        self.lockout = Lockout() if lockout is None else lockout

    async def check(self, request: web.Request) -> Credential | None:
        """The request's credential; None: it has none. Raises 401 for a wrong
        Authorization header, and the database's error when whether a session
        was logged out cannot be known."""
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer" and self.signer.token_ok(value.strip()):
                return Credential("bearer")
            raise unauthorized()
        cookie = request.cookies.get(COOKIE)
        if cookie:
            session = self.signer.session(cookie)
            if session is not None and not await self.revocations.revoked(session.nonce):
                return Credential("session", session.nonce)
        return None

    async def log_out(self, request: web.Request) -> None:
        """End the request's session (if it has a valid one) on every instance.
        Raises the database's error when that could not be recorded."""
        session = self.signer.session(request.cookies.get(COOKIE, ""))
        if session is not None:
            await self.revocations.revoke(session.nonce, session.expiry)

    def address(self, request: web.Request) -> str:
        """The client's address (`bot.web.clients`)."""
        return client_address(request, self.trust_proxy)

    def secure_cookie(self, request: web.Request) -> bool:
        """Whether the session cookie is marked Secure: the request came over
        TLS, or through the TLS-terminating proxy `trust_proxy` declares."""
        if not self.trust_proxy:
            return request.secure
        if forwarded_https(request) is False:
            log.warning(
                "admin.login_over_http: [server] trust_proxy is on, so the session cookie is "
                "Secure, but the proxy says this login came over plain http "
                "(X-Forwarded-Proto); a browser keeps a Secure cookie only over https"
            )
        return True


def unauthorized() -> web.HTTPUnauthorized:
    return web.HTTPUnauthorized(
        text="401: authentication required (Authorization: Bearer <token>, or log in at "
        f"{LOGIN_PATH})\n",
        headers={"WWW-Authenticate": 'Bearer realm="switchboard-admin"'},
    )


def wants_html(request: web.Request) -> bool:
    return request.method == "GET" and "text/html" in request.headers.get("Accept", "")


def set_session_cookie(
    response: web.StreamResponse, value: str, secure: bool, max_age: int
) -> None:
    response.set_cookie(
        COOKIE,
        value,
        path="/admin",
        httponly=True,
        samesite="Strict",
        secure=secure,
        max_age=max_age,
    )


def clear_session_cookie(response: web.StreamResponse, secure: bool) -> None:
    response.del_cookie(COOKIE, path="/admin", secure=secure, httponly=True, samesite="Strict")
