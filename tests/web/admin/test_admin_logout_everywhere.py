"""Logging out of `/admin` ends the session on every instance sharing the
database: two services (two `App`s with their web servers) on one SQLite file
or one PostgreSQL schema; the revocation list as the database keeps it (a
hash of the nonce, never the cookie) and as an instance caches it (read at
most once per refresh, taking effect within it); and the database failing
under a logout or under the list's read (the logout is not half done; no
session is let in on an unread list)."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from bot.app.service import App
from bot.store import Store
from bot.store.models import AuditEntry, RevokedSession
from bot.store.revocations import revoke, revoked
from bot.web.admin.auth import COOKIE
from bot.web.admin.revoked import REFRESH_S, Revocations
from tests.waiting import PATIENCE_S
from tests.web.admin.conftest import ADMIN_TOKEN, CSRF, open_dashboard

HTML = {"Accept": "text/html"}


def url(app: App) -> str:
    assert app.web is not None
    return app.web.url


async def log_in(app: App) -> tuple[str, str]:
    """Log in through `app`'s form: the cookie's value and the session's CSRF token."""
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url(app) + "/admin/login", data={"token": ADMIN_TOKEN}, allow_redirects=False
        ) as response:
            assert response.status == 303
            cookie = response.cookies[COOKIE].value
        status, body = await get(app, "/admin/users", cookie)
        assert status == 200, body
    found = CSRF.search(body)
    assert found is not None
    return cookie, found[1]


async def get(app: App, path: str, cookie: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            url(app) + path,
            headers={**HTML, "Cookie": f"{COOKIE}={cookie}"},
            allow_redirects=False,
        ) as response,
    ):
        return response.status, await response.text()


async def log_out(app: App, cookie: str, csrf: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url(app) + "/admin/logout",
            data={"csrf": csrf},
            headers={"Cookie": f"{COOKIE}={cookie}"},
            allow_redirects=False,
        ) as response,
    ):
        return response.status, await response.text()


async def answer_becomes(app: App, cookie: str, status: int, meanwhile: int) -> str:
    """`app`'s page for this session once it answers `status`, `meanwhile`
    until then (what an instance caches changes within `REFRESH_S`; a hang
    fails after `PATIENCE_S`)."""
    async with asyncio.timeout(PATIENCE_S):
        while True:
            answer, body = await get(app, "/admin/users", cookie)
            if answer == status:
                return body
            assert answer == meanwhile, (answer, body)
            await asyncio.sleep(0.05)


async def refused_on(app: App, cookie: str) -> None:
    """Until `app` sends this session to the login page (let in until then)."""
    await answer_becomes(app, cookie, 303, meanwhile=200)


async def rename(store: Store, old: str, new: str) -> None:
    async with store.write() as session:
        await session.exec(text(f"ALTER TABLE {old} RENAME TO {new}"))  # type: ignore[call-overload]


async def test_a_logout_on_one_instance_ends_the_session_on_every_instance(
    make_app: Any,
) -> None:
    a, _ = await open_dashboard(make_app)
    b, _ = await open_dashboard(make_app)  # another instance on the same database
    assert url(a) != url(b)
    cookie, csrf = await log_in(a)
    other, _ = await log_in(b)  # another session, logged in on B
    status, body = await get(b, "/admin/users", cookie)
    assert status == 200 and "Users" in body  # A's session opens B (same token)

    status, _ = await log_out(a, cookie, csrf)
    assert status == 303
    status, _ = await get(a, "/admin/users", cookie)
    assert status == 303  # at once where the logout was served
    await refused_on(b, cookie)  # and on B (within REFRESH_S)
    status, _ = await get(b, "/admin", other)
    assert status == 200  # B's own session goes on
    status, _ = await log_out(b, cookie, csrf)
    assert status == 401  # logging out an ended session: no credential, nothing done

    async with a.store.read() as session:
        rows = (await session.exec(select(RevokedSession))).all()
    nonce = cookie.split(".")[1]
    assert [row.digest for row in rows] == [hashlib.sha256(nonce.encode()).hexdigest()]
    stored = repr([row.model_dump() for row in rows])
    assert nonce not in stored and cookie.split(".")[2] not in stored  # never in clear
    expiry = datetime.fromtimestamp(int(cookie.split(".")[0]), UTC)
    assert rows[0].expires_at == expiry  # kept until the session would have expired
    async with a.store.read() as session:
        logouts = (
            await session.exec(select(AuditEntry).where(AuditEntry.action == "admin logout"))
        ).all()
    assert len(logouts) == 1


async def test_an_instance_reads_the_list_at_most_once_per_refresh(store: Store) -> None:
    now = [100.0]
    here = Revocations(store, clock=lambda: now[0])
    there = Revocations(store, clock=lambda: now[0])  # another instance
    expires = (datetime.now(UTC) + timedelta(hours=1)).timestamp()
    assert not await there.revoked("nonce-1")  # read: nothing revoked
    await here.revoke("nonce-1", expires)
    assert await here.revoked("nonce-1")  # at once where it was revoked
    now[0] += REFRESH_S - 0.01
    assert not await there.revoked("nonce-1")  # read less than REFRESH_S ago: not again
    now[0] += 0.01
    assert await there.revoked("nonce-1")  # read again: ended here too
    assert not await there.revoked("nonce-2")


async def test_a_revocation_the_database_refuses_is_not_taken_here_either(store: Store) -> None:
    revocations = Revocations(store)
    expires = (datetime.now(UTC) + timedelta(hours=1)).timestamp()
    await rename(store, "revoked_sessions", "revoked_sessions_away")
    try:
        with pytest.raises(SQLAlchemyError):
            await revocations.revoke("nonce-1", expires)
    finally:
        await rename(store, "revoked_sessions_away", "revoked_sessions")
    assert not await revocations.revoked("nonce-1")  # the caller said it failed: it did
    await revocations.revoke("nonce-1", expires)
    assert await revocations.revoked("nonce-1")


async def test_expired_revocations_are_forgotten_by_the_next_logout(store: Store) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    future = datetime.now(UTC) + timedelta(hours=12)
    await revoke(store, "old", past)
    await revoke(store, "new", future)
    await revoke(store, "new", future)  # twice (two instances at once): harmless
    assert await revoked(store) == {hashlib.sha256(b"new").hexdigest()}
    async with store.read() as session:
        assert len((await session.exec(select(RevokedSession))).all()) == 1


async def test_a_logout_the_database_cannot_record_is_not_half_done(make_app: Any) -> None:
    a, _ = await open_dashboard(make_app)
    b, _ = await open_dashboard(make_app)
    cookie, csrf = await log_in(a)
    await rename(a.store, "revoked_sessions", "revoked_sessions_away")
    try:
        status, body = await log_out(a, cookie, csrf)
        assert status == 503 and "The database did not answer" in body
        assert "revoked_sessions" not in body  # no SQL on the page
    finally:
        await rename(a.store, "revoked_sessions_away", "revoked_sessions")
    for app in (a, b):  # still logged in, everywhere: the logout can be tried again
        status, _ = await get(app, "/admin/users", cookie)
        assert status == 200
    status, _ = await log_out(a, cookie, csrf)
    assert status == 303
    await refused_on(a, cookie)
    await refused_on(b, cookie)


async def test_no_session_is_let_in_when_the_list_cannot_be_read(make_app: Any) -> None:
    a, _ = await open_dashboard(make_app)
    cookie, _ = await log_in(a)
    await rename(a.store, "revoked_sessions", "revoked_sessions_away")
    try:
        body = await answer_becomes(a, cookie, 503, meanwhile=200)  # the last read too old
        assert "The database did not answer" in body
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                url(a) + "/admin/users", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ) as response,
        ):
            assert response.status == 200  # a bearer request needs no list
        status, _ = await get(a, "/admin/login", cookie)
        assert status == 200  # the login form still opens
    finally:
        await rename(a.store, "revoked_sessions_away", "revoked_sessions")
    await answer_becomes(a, cookie, 200, meanwhile=503)  # the list read again: let in
