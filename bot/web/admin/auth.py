"""Who may see `/admin`: the holder of `SWITCHBOARD_ADMIN_TOKEN`.

Two ways in:
- `Authorization: Bearer <token>` on every request (scripts, curl). A request
  carrying a wrong or malformed Authorization header gets 401, whatever else
  it carries.
- The login form: posting the token sets a session cookie (HttpOnly,
  SameSite=Strict, Path=/admin). Its value is `<expiry>.<nonce>.<mac>`, the mac
  an HMAC-SHA256 of expiry and nonce under a key derived from the token, so a
  session is valid on every instance that has the same token, ends at its
  expiry (`SESSION_HOURS`), and ends for all at once when the token changes.
  Logout revokes the nonce (kept in this process until the session would have
  expired) and clears the cookie.

Ten wrong tokens through the form within five minutes close the form (429)
until they age out. Without credentials a browser page request (GET asking for HTML) is sent to the
login page (303); anything else gets 401. Every comparison of a secret value is
`hmac.compare_digest`. The token and cookies are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

COOKIE = "switchboard_admin"
SESSION_HOURS = 12
LOGIN_PATH = "/admin/login"
LOGIN_FAILURES = 10
LOGIN_WINDOW_S = 300.0
"""After `LOGIN_FAILURES` wrong tokens within `LOGIN_WINDOW_S`, the login form
refuses every attempt (429) until the oldest of them is that old: guessing a
token through the form is slow. Bearer requests are not affected."""


@dataclass(frozen=True, slots=True)
class Credential:
    """How a request proved it holds the token: "bearer", or a login "session"
    (then `nonce` names it, for its CSRF token and logout)."""

    kind: str
    nonce: str = ""


def same(a: str, b: str) -> bool:
    """Constant-time equality of two strings (any characters)."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


class Gate:
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
        self._failures: deque[float] = deque()
        self._key = hashlib.sha256(b"switchboard-admin-session\0" + token.encode()).digest()
        self.session_seconds = session_seconds
        self._revoked: dict[str, float] = {}
        """nonce → when the session would have expired."""

    # -- the token --------------------------------------------------------------

    def token_ok(self, candidate: str) -> bool:
        return same(candidate, self._token)

    def login_blocked(self) -> bool:
        """Too many wrong tokens lately: refuse the login form for now."""
        now = self._clock()
        while self._failures and self._failures[0] <= now - LOGIN_WINDOW_S:
            self._failures.popleft()
        return len(self._failures) >= LOGIN_FAILURES

    def login_failed(self) -> None:
        self._failures.append(self._clock())

    # -- sessions ---------------------------------------------------------------

    def new_session(self) -> str:
        """A fresh cookie value."""
        expiry = str(int(self._clock() + self.session_seconds))
        nonce = secrets.token_urlsafe(18)
        return f"{expiry}.{nonce}.{self.mac('session', expiry, nonce)}"

    def session_nonce(self, value: str) -> str | None:
        """The session's nonce when `value` is a valid, unexpired, not revoked
        cookie value; else None."""
        parts = value.split(".")
        if len(parts) != 3:
            return None
        expiry, nonce, mac = parts
        if not same(mac, self.mac("session", expiry, nonce)):
            return None
        if not expiry.isdigit() or int(expiry) <= self._clock() or nonce in self._revoked:
            return None
        return nonce

    def revoke(self, value: str) -> None:
        nonce = self.session_nonce(value)
        if nonce is None:
            return
        now = self._clock()
        for old, until in list(self._revoked.items()):
            if until <= now:
                del self._revoked[old]
        self._revoked[nonce] = float(value.split(".", 1)[0])

    def mac(self, purpose: str, *parts: str) -> str:
        """HMAC-SHA256 (hex) of `parts` for `purpose` under the token's key."""
        message = "\0".join((purpose, *parts)).encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    # -- requests ---------------------------------------------------------------

    def check(self, request: web.Request) -> Credential | None:
        """The request's credential; None: it has none. Raises 401 for a wrong
        Authorization header."""
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "bearer" and self.token_ok(value.strip()):
                return Credential("bearer")
            raise unauthorized()
        cookie = request.cookies.get(COOKIE)
        if cookie:
            nonce = self.session_nonce(cookie)
            if nonce is not None:
                return Credential("session", nonce)
        return None


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


def clear_session_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/admin")
