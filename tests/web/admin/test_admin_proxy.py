"""The login lockout per source address, and `[server] trust_proxy`, over HTTP
on the real web server: wrong tokens from one address shut the form for that
address only (the operator logs in from another); without trust_proxy a
forged X-Forwarded-For changes nothing; with it, the proxy's right-most entry
is the client (forged entries to its left change nothing) and the session
cookie is Secure, which it is not without.

Two client addresses on one machine: 127.0.0.1 and 127.0.0.2 (both loopback
on Linux; the client binds its end of the connection to one of them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from pydantic import SecretStr
from sqlmodel import col, select

from bot.app.service import App
from bot.store.models import AuditEntry
from bot.web.admin.auth import COOKIE
from bot.web.admin.lockout import LOGIN_FAILURES
from tests.web.admin.conftest import ADMIN_TOKEN

HTML = {"Accept": "text/html"}


async def serve(make_app: Any, trust_proxy: bool) -> App:
    app: App = await make_app(server={"port": 0, "host": "127.0.0.1", "trust_proxy": trust_proxy})
    app.secrets = app.secrets.model_copy(update={"admin_token": SecretStr(ADMIN_TOKEN)})
    await app.start([])
    return app


@asynccontextmanager
async def client(source: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A client whose connections come from `source` (a loopback address)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        yield http


async def log_in(
    app: App, http: aiohttp.ClientSession, token: str, **headers: str
) -> tuple[int, str | None]:
    """Post the login form: the status and the Set-Cookie header (None without)."""
    assert app.web is not None
    async with http.post(
        app.web.url + "/admin/login",
        data={"token": token},
        headers=headers,
        allow_redirects=False,
    ) as response:
        return response.status, response.headers.get("Set-Cookie")


async def opens(app: App, set_cookie: str | None) -> bool:
    """Whether the session a login set opens the users page."""
    assert app.web is not None and set_cookie is not None
    value = set_cookie.split(";")[0].split("=", 1)[1]
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            app.web.url + "/admin/users",
            headers={**HTML, "Cookie": f"{COOKIE}={value}"},
            allow_redirects=False,
        ) as response,
    ):
        return response.status == 200


async def logins_audited(app: App) -> list[tuple[str, str | None]]:
    async with app.store.read() as session:
        rows = await session.exec(
            select(AuditEntry)
            .where(AuditEntry.action == "admin login")
            .order_by(col(AuditEntry.id))
        )
        return [(row.outcome, row.where) for row in rows.all()]


def secure(set_cookie: str | None) -> bool:
    assert set_cookie is not None
    return "secure" in {part.strip().lower() for part in set_cookie.split(";")}


async def test_wrong_tokens_from_one_address_do_not_lock_out_another(make_app: Any) -> None:
    app = await serve(make_app, trust_proxy=False)
    async with client("127.0.0.2") as attacker, client("127.0.0.1") as operator:
        for _ in range(LOGIN_FAILURES):
            status, cookie = await log_in(app, attacker, "guess")
            assert (status, cookie) == (401, None)
        status, cookie = await log_in(app, attacker, ADMIN_TOKEN)
        assert (status, cookie) == (429, None)  # the attacker's address: shut
        # A forged X-Forwarded-For is not believed without trust_proxy.
        for forged in ("127.0.0.1", "198.51.100.7", "198.51.100.7, 127.0.0.1"):
            status, cookie = await log_in(app, attacker, ADMIN_TOKEN, **{"X-Forwarded-For": forged})
            assert (status, cookie) == (429, None)
        # The operator, from another address, logs in.
        status, cookie = await log_in(app, operator, ADMIN_TOKEN)
        assert status == 303 and await opens(app, cookie)
        assert not secure(cookie)  # no proxy declared: plain http, no Secure
        status, cookie = await log_in(app, operator, ADMIN_TOKEN, **{"X-Forwarded-Proto": "https"})
        assert status == 303 and not secure(cookie)  # nor is that header believed
    audited = await logins_audited(app)
    assert (
        audited == [("denied", "web 127.0.0.2")] * LOGIN_FAILURES + [("ok", "web 127.0.0.1")] * 2
    )  # a refused (429) attempt is not audited: a locked source cannot fill the log


async def test_behind_a_trusted_proxy_forwarded_addresses_count_separately(
    make_app: Any,
) -> None:
    app = await serve(make_app, trust_proxy=True)
    proxy = {"X-Forwarded-Proto": "https"}
    async with client("127.0.0.1") as http:  # every request from the proxy's address
        for _ in range(LOGIN_FAILURES):
            forwarded = {"X-Forwarded-For": "192.0.2.1"}
            status, _ = await log_in(app, http, "guess", **proxy, **forwarded)
            assert status == 401
        for forwarded in (
            "192.0.2.1",
            "198.51.100.7, 192.0.2.1",  # the client's own (forged) entry, then the proxy's
            "203.0.113.5:4711, [::ffff:192.0.2.1]:443",
        ):
            status, cookie = await log_in(
                app, http, ADMIN_TOKEN, **proxy, **{"X-Forwarded-For": forwarded}
            )
            assert (status, cookie) == (429, None), forwarded
        # Another client through the same proxy logs in, with a Secure cookie.
        status, cookie = await log_in(
            app, http, ADMIN_TOKEN, **proxy, **{"X-Forwarded-For": "192.0.2.1, 198.51.100.7"}
        )
        assert status == 303 and secure(cookie) and await opens(app, cookie)
        # A request that did not come through the proxy counts as the peer.
        status, cookie = await log_in(app, http, ADMIN_TOKEN)
        assert status == 303 and secure(cookie)
    audited = await logins_audited(app)
    assert audited == [("denied", "web 192.0.2.1")] * LOGIN_FAILURES + [
        ("ok", "web 198.51.100.7"),
        ("ok", "web 127.0.0.1"),
    ]
