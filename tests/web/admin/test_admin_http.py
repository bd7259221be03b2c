"""The admin dashboard over HTTP, on the real web server and database: off
without a token, no data without credentials, bearer and login sessions (the
cookie's attributes, logout, tampering), CSRF, every change through the forms
visible on the pages, in the audit log and in the database, 400/404 for
garbage, and escaping of what users control."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import aiohttp
from sqlalchemy import text
from sqlmodel import col, select

from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import parse_when
from bot.store.models import (
    AuditEntry,
    Budget,
    Conversation,
    DeliveryFailure,
    PlatformLink,
    Run,
    ScheduledJob,
    TokenLog,
    TraceSpan,
    User,
)
from bot.types import utcnow
from bot.web.admin.auth import COOKIE
from bot.web.admin.lockout import LOGIN_FAILURES
from tests.web.admin.conftest import ADMIN_TOKEN, Dashboard, open_dashboard

HTML = {"Accept": "text/html,application/xhtml+xml"}
PAGES = ("/admin", "/admin/users", "/admin/runs", "/admin/jobs", "/admin/audit")


async def audit_rows(dash: Dashboard) -> list[AuditEntry]:
    async with dash.app.store.read() as session:
        return list((await session.exec(select(AuditEntry).order_by(col(AuditEntry.id)))).all())


async def user_id(dash: Dashboard, account: str = "alice") -> int:
    async with dash.app.store.read() as session:
        link = (
            await session.exec(select(PlatformLink).where(PlatformLink.platform_user_id == account))
        ).one()
    return link.user_id


async def budget_row(dash: Dashboard, uid: int) -> Budget | None:
    async with dash.app.store.read() as session:
        return await session.get(Budget, uid)


def cell(body: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">([^<]*)<', body)
    assert found is not None, f"no #{element_id} in the page"
    return found[1]


# -- on / off, credentials -----------------------------------------------------------


async def test_without_the_token_every_admin_path_is_404(make_app: Any) -> None:
    app, _ = await open_dashboard(make_app, token=None)
    assert app.web is not None
    async with aiohttp.ClientSession() as http:
        for path in (*PAGES, "/admin/login", "/admin/runs/x", "/admin/static/admin.css"):
            for headers in ({}, HTML, {"Authorization": f"Bearer {ADMIN_TOKEN}"}):
                async with http.get(app.web.url + path, headers=headers) as response:
                    assert response.status == 404, path
        async with http.post(app.web.url + "/admin/login", data={"token": "x"}) as response:
            assert response.status == 404
        async with http.get(app.web.url + "/healthz") as response:
            assert response.status == 200


async def test_without_credentials_no_data(dash: Dashboard) -> None:
    await dash.say("hello there", name="Zanzibar Quokka")
    for path in PAGES:
        status, body = await dash.page(path)  # an API client: 401
        assert status == 401 and "Quokka" not in body, path
        async with dash.http.get(dash.url + path, headers=HTML, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/admin/login"  # a browser
            assert "Quokka" not in await r.text()
    for wrong in ("Bearer nope", f"Bearer {ADMIN_TOKEN}x", "Basic " + ADMIN_TOKEN, "Bearer"):
        status, body = await dash.page("/admin/users", headers={"Authorization": wrong, **HTML})
        assert status == 401 and "Quokka" not in body
    uid = await user_id(dash)
    status, _ = await dash.post(f"/admin/users/{uid}/budget", {"budget": "5"})
    assert status == 401
    row = await budget_row(dash, uid)
    assert row is None or row.limit_mode == "role"


async def test_bearer_token_reads_pages(dash: Dashboard) -> None:
    await dash.say("hello there", name="Zanzibar Quokka")
    for path in PAGES:
        status, body = await dash.page(path, headers=dash.bearer())
        assert status == 200, (path, body)
    _, users = await dash.page("/admin/users", headers=dash.bearer())
    assert "Zanzibar Quokka" in users and "console:alice" in users


async def test_login_sets_a_strict_httponly_cookie_and_logout_ends_it(dash: Dashboard) -> None:
    await dash.say("hello there", name="Zanzibar Quokka")
    status, form = await dash.page("/admin/login")
    assert status == 200 and 'name="token"' in form and 'type="password"' in form

    # A wrong token: 401, the login page again, no cookie, no data.
    async with dash.http.post(
        dash.url + "/admin/login", data={"token": "guess"}, allow_redirects=False
    ) as response:
        assert response.status == 401
        assert "Set-Cookie" not in response.headers
        body = await response.text()
    assert "not the admin token" in body and "Quokka" not in body

    async with dash.http.post(
        dash.url + "/admin/login", data={"token": ADMIN_TOKEN}, allow_redirects=False
    ) as response:
        assert response.status == 303 and response.headers["Location"] == "/admin"
        cookie = response.headers["Set-Cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "path"} <= attributes
    assert "SameSite=Strict" in cookie and "Path=/admin" in cookie
    assert ADMIN_TOKEN not in cookie
    status, body = await dash.page("/admin/users")
    assert status == 200 and "Zanzibar Quokka" in body

    value = cookie.split(";")[0].split("=", 1)[1]
    csrf = re.search(r'name="csrf" value="([^"]+)"', body)
    assert csrf is not None
    status, _ = await dash.post("/admin/logout", {"csrf": csrf[1]})
    assert status == 303
    # The old cookie no longer opens anything, even sent by hand.
    async with (
        aiohttp.ClientSession() as fresh,
        fresh.get(
            dash.url + "/admin/users",
            headers={**HTML, "Cookie": f"{COOKIE}={value}"},
            allow_redirects=False,
        ) as response,
    ):
        assert response.status == 303
        assert "Quokka" not in await response.text()
    audit = [(e.action, e.outcome) for e in await audit_rows(dash)]
    assert audit == [("admin login", "denied"), ("admin login", "ok"), ("admin logout", "ok")]


async def test_a_tampered_or_foreign_cookie_opens_nothing(dash: Dashboard) -> None:
    await dash.login()
    real = next(c.value for c in dash.http.cookie_jar if c.key == COOKIE)
    expiry, nonce, mac = real.split(".")
    forged = [
        f"{int(expiry) + 86400}.{nonce}.{mac}",  # a longer life
        f"{expiry}.{nonce}x.{mac}",
        f"{expiry}.{nonce}.{mac[:-1]}0" if mac[-1] != "0" else f"{expiry}.{nonce}.{mac[:-1]}1",
        "garbage",
        "1.2.3.4",
        "",
        "é.ü.ß",
    ]
    async with aiohttp.ClientSession() as fresh:
        for value in forged:
            async with fresh.get(
                dash.url + "/admin/users",
                headers={**HTML, "Cookie": f"{COOKIE}={value}"},
                allow_redirects=False,
            ) as response:
                assert response.status == 303, value


# -- CSRF -----------------------------------------------------------------------------


async def test_a_post_without_the_csrf_token_is_refused(dash: Dashboard) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    csrf = await dash.login()
    for data in (
        {"budget": "5k"},
        {"budget": "5k", "csrf": ""},
        {"budget": "5k", "csrf": "0" * 64},
    ):
        status, body = await dash.post(f"/admin/users/{uid}/budget", data)
        assert status == 403, body
    status, _ = await dash.post(f"/admin/users/{uid}/role", {"role": "admin"})
    assert status == 403
    status, _ = await dash.post("/admin/logout", {})
    assert status == 403
    row = await budget_row(dash, uid)
    assert row is None or row.limit_mode == "role"
    assert [e.action for e in await audit_rows(dash)] == ["admin login"]
    # Another session's token is not this one's.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other_http:
        other = Dashboard(dash.app, dash.adapter, other_http)
        other_csrf = await other.login()
        assert other_csrf != csrf
        status, _ = await dash.post(
            f"/admin/users/{uid}/budget", {"budget": "5k", "csrf": other_csrf}
        )
        assert status == 403
    # Bearer requests need none (no ambient authority).
    status, _ = await dash.post(
        f"/admin/users/{uid}/budget", {"budget": "7k"}, headers=dash.bearer()
    )
    assert status == 303


# -- changes --------------------------------------------------------------------------


async def test_budget_change_shows_on_the_users_page_in_the_audit_log_and_db(
    dash: Dashboard,
) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    csrf = await dash.login()
    status, _ = await dash.post(f"/admin/users/{uid}/budget", {"budget": "50k", "csrf": csrf})
    assert status == 303
    _, users = await dash.page("/admin/users?notice=budget")
    assert "Budget saved." in users
    row = re.search(rf'<tr id="user-{uid}">(.*?)</tr>', users, re.S)
    assert row is not None and '<span class="limit">50,000</span>' in row[1]
    assert "(fixed)" in row[1]
    budget = await budget_row(dash, uid)
    assert budget is not None and (budget.limit_mode, budget.limit_tokens) == ("fixed", 50_000)
    _, audit = await dash.page("/admin/audit?actor=admin-web&action=setbudget")
    assert "/setbudget" in audit and "console:alice" in audit and "&#34;tokens&#34;: 50000" in audit
    entry = (await audit_rows(dash))[-1]
    assert (entry.actor, entry.action, entry.where, entry.target) == (
        "admin-web",
        "/setbudget",
        "web",
        "console:alice",
    )
    assert entry.details == {"user_id": uid, "mode": "fixed", "tokens": 50_000}

    status, _ = await dash.post(f"/admin/users/{uid}/budget", {"budget": "unlimited", "csrf": csrf})
    assert status == 303
    budget = await budget_row(dash, uid)
    assert budget is not None and budget.limit_mode == "unlimited"


async def test_role_change(dash: Dashboard) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    csrf = await dash.login()
    status, _ = await dash.post(f"/admin/users/{uid}/role", {"role": "admin", "csrf": csrf})
    assert status == 303
    _, users = await dash.page("/admin/users")
    row = re.search(rf'<tr id="user-{uid}">(.*?)</tr>', users, re.S)
    assert row is not None and '<td class="role">admin</td>' in row[1]
    async with dash.app.store.read() as session:
        user = await session.get(User, uid)
    assert user is not None and user.role == "admin"
    entry = (await audit_rows(dash))[-1]
    assert (entry.actor, entry.action, entry.details) == (
        "admin-web",
        "/role",
        {"user_id": uid, "from": "guest", "to": "admin"},
    )
    # The running pipeline sees it at once (the identity cache was told).
    person = await dash.app.ops.directory.get(uid)
    assert person is not None and person.role.value == "admin"


async def test_garbage_form_input_is_a_400_and_unknown_ids_404(dash: Dashboard) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    csrf = await dash.login()
    before = len(await audit_rows(dash))
    for field, value in (
        ("budget", "lots"),
        ("budget", "-5"),
        ("budget", "1e9"),
        ("budget", "9" * 30),
        ("budget", "x" * 5000),
        ("budget", "   "),
        ("role", "owner"),
        ("role", "emperor"),
        ("role", ""),
    ):
        status, body = await dash.post(f"/admin/users/{uid}/{field}", {field: value, "csrf": csrf})
        assert status == 400, (field, value, body)
        assert "Bad input" in body
    status, body = await dash.post(f"/admin/users/{uid}/budget", {"csrf": csrf})  # no field
    assert status == 400
    status, _ = await dash.post("/admin/users/99999/budget", {"budget": "5", "csrf": csrf})
    assert status == 404
    status, _ = await dash.post("/admin/users/abc/budget", {"budget": "5", "csrf": csrf})
    assert status == 404
    status, _ = await dash.post("/admin/jobs/424242/pause", {"csrf": csrf})
    assert status == 404
    status, _ = await dash.page("/admin/runs/no-such-run")
    assert status == 404
    status, _ = await dash.page("/admin/runs/" + "%3Cscript%3E" * 20)
    assert status == 404
    assert len(await audit_rows(dash)) == before  # nothing changed, nothing audited
    row = await budget_row(dash, uid)
    assert row is None or row.limit_mode == "role"
    status, _ = await dash.page("/healthz")
    assert status == 200


# -- jobs -----------------------------------------------------------------------------


async def test_job_pause_resume_delete(dash: Dashboard) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    async with dash.app.store.read() as session:
        conversation = (await session.exec(select(Conversation))).one()
    now = utcnow()
    assert conversation.id is not None
    job = await Jobs(dash.app.store).create(
        owner_user_id=uid,
        conversation_id=conversation.id,
        chat_type="direct",
        prompt="water the <b>plants</b>",
        spec=parse_when("every 2 hours", timezone="UTC", now=now),
        now=now,
    )
    csrf = await dash.login()
    _, page = await dash.page("/admin/jobs")
    row = re.search(rf'<tr id="job-{job.id}">(.*?)</tr>', page, re.S)
    assert row is not None and "active" in row[1] and job.description in row[1]
    assert "water the &lt;b&gt;plants&lt;/b&gt;" in row[1]
    assert f"{job.next_run_at:%Y-%m-%d %H:%M:%S}" in row[1]

    async def state() -> str:
        async with dash.app.store.read() as session:
            found = await session.get(ScheduledJob, job.id)
        assert found is not None
        return found.state

    for action, expected in (("pause", "paused"), ("resume", "active"), ("delete", "removed")):
        status, body = await dash.post(f"/admin/jobs/{job.id}/{action}", {"csrf": csrf})
        assert status == 303, body
        assert await state() == expected
    status, _ = await dash.post(f"/admin/jobs/{job.id}/pause", {"csrf": csrf})
    assert status == 404  # deleted: no longer open
    status, _ = await dash.post(f"/admin/jobs/{job.id}/explode", {"csrf": csrf})
    assert status == 404
    _, page = await dash.page("/admin/jobs")
    assert f'id="job-{job.id}"' not in page
    _, page = await dash.page("/admin/jobs?all=1")
    assert f'id="job-{job.id}"' in page
    jobs_audit = [(e.action, e.target, e.where) for e in await audit_rows(dash)][1:]
    assert jobs_audit == [
        ("jobs pause", f"job #{job.id}", "web"),
        ("jobs resume", f"job #{job.id}", "web"),
        ("jobs remove", f"job #{job.id}", "web"),
    ]


# -- runs, traces, audit, overview ----------------------------------------------------


async def test_runs_and_a_trace_with_a_failed_tool_call(dash: Dashboard) -> None:
    await dash.say("hello")
    uid = await user_id(dash)
    async with dash.app.store.read() as session:
        real = (await session.exec(select(Run))).one()
    start = utcnow() - timedelta(minutes=5)
    async with dash.app.store.write() as session:
        session.add(
            Run(
                id="runfailed01",
                conversation_id=real.conversation_id,
                user_id=uid,
                status="failed",
                model="claude-test",
                tokens=1234,
                error="the tool <exploded>",
                started_at=start,
                finished_at=start + timedelta(seconds=3),
            )
        )
        session.add(
            TraceSpan(
                run_id="runfailed01",
                kind="llm",
                name="claude-test",
                started_at=start,
                duration_ms=800,
                input_tokens=1000,
                output_tokens=34,
                detail="tool_use",
            )
        )
        session.add(
            TraceSpan(
                run_id="runfailed01",
                kind="tool",
                name="fetch_page",
                started_at=start + timedelta(seconds=1),
                duration_ms=1500,
                is_error=True,
                detail="HTTP 500 from <example>",
            )
        )
    csrf_free = await dash.login()
    assert csrf_free
    _, runs = await dash.page("/admin/runs")
    assert f'href="/admin/runs/{real.id}"' in runs and 'href="/admin/runs/runfailed01"' in runs
    assert '<td class="status status-failed">failed</td>' in runs and "3.00 s" in runs

    _, trace = await dash.page(f"/admin/runs/{real.id}")
    assert real.model in trace and "<td>llm</td>" in trace  # the real run's LLM call
    async with dash.app.store.read() as session:
        spans = (await session.exec(select(TraceSpan).where(TraceSpan.run_id == real.id))).all()
    assert spans and all(f"{s.input_tokens:,}" in trace for s in spans)

    _, failed = await dash.page("/admin/runs/runfailed01")
    assert 'id="run-error">Error: the tool &lt;exploded&gt;' in failed
    assert "1 LLM, 1 tool" in failed and "1,234" in failed
    assert "<strong>ERROR</strong> HTTP 500 from &lt;example&gt;" in failed
    assert "+1.00 s" in failed

    _, filtered = await dash.page("/admin/runs?conversation=slack:nowhere")
    assert "runfailed01" not in filtered and "No runs in this conversation" in filtered


async def test_audit_log_filters(dash: Dashboard) -> None:
    audit = dash.app.ops.audit
    await audit.record(actor="cli:root", action="jobs pause", target="job #1", where="cli")
    await audit.record(actor="admin-web", action="/setbudget", target="console:bob", where="web")
    await audit.record(actor="slack:U1", action="/role", target="console:bob", where="slack")
    await dash.login()

    def actions(body: str) -> list[str]:
        return re.findall(r"<td>(jobs pause|/setbudget|/role|admin login)</td>", body)

    _, body = await dash.page("/admin/audit")
    assert actions(body) == ["admin login", "/role", "/setbudget", "jobs pause"]
    _, body = await dash.page("/admin/audit?actor=admin-web")
    assert actions(body) == ["admin login", "/setbudget"]
    _, body = await dash.page("/admin/audit?target=console:bob&action=role")
    assert actions(body) == ["/role"]
    _, body = await dash.page("/admin/audit?action=%25")  # LIKE wildcards are literal
    assert actions(body) == [] and "No matching entries" in body
    _, body = await dash.page("/admin/audit?actor=%3Cscript%3E")
    assert 'value="&lt;script&gt;"' in body and "<script>" not in body


async def test_user_controlled_text_is_escaped_everywhere(dash: Dashboard) -> None:
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    await dash.say("hi", user="mallory\"'><svg onload=alert(2)>", name=evil)
    async with dash.app.store.write() as session:
        session.add(
            DeliveryFailure(
                platform="console",
                conversation_key="console:<b>room</b>",
                channel_id="room",
                text="t",
                reason=evil,
            )
        )
    await dash.login()
    for path in PAGES:
        _, body = await dash.page(path)
        for raw in ("<script>alert", "<img src=x", "<svg onload", "<b>room"):
            assert raw not in body, (path, raw)
    _, users = await dash.page("/admin/users")
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in users
    _, overview = await dash.page("/admin")
    assert "&lt;img src=x onerror=alert(1)&gt;" in overview  # the failure's reason


async def test_overview_counts_messages_tokens_cost_and_top_users(dash: Dashboard) -> None:
    await dash.say("one", user="alice", name="Alice Anders")
    await dash.say("two", user="alice", name="Alice Anders")
    await dash.say("three", user="bob", name="Bob Berg")
    await dash.login()
    _, body = await dash.page("/admin")
    async with dash.app.store.read() as session:
        logs = (await session.exec(select(TokenLog))).all()
    tokens = sum(
        x.input_tokens + x.output_tokens + x.cache_read_tokens + x.cache_write_tokens for x in logs
    )
    assert tokens > 0
    assert cell(body, "messages-total") == "3"
    assert cell(body, "tokens-total") == f"{tokens:,}"
    assert cell(body, "cost-month") == f"${sum(x.cost_usd for x in logs):.4f}"
    assert cell(body, "inbox-depth") == "0"
    assert cell(body, "failures-week") == "0"
    top = re.search(r'<table id="top-users">(.*?)</table>', body, re.S)
    assert top is not None
    assert top[1].index("Alice Anders") < top[1].index("Bob Berg")  # most tokens first
    by_model = re.search(r'<table id="by-model">(.*?)</table>', body, re.S)
    assert by_model is not None  # tokens and cost per model
    for model in {x.model for x in logs}:
        used = sum(
            x.input_tokens + x.output_tokens + x.cache_read_tokens + x.cache_write_tokens
            for x in logs
            if x.model == model
        )
        assert f'<td>{model}</td><td class="num">{used:,}</td>' in by_model[1]
    assert body.count('<rect class="bar"') == 28  # 14 days × 2 charts
    assert "<script" not in body
    async with dash.http.get(dash.url + "/admin") as response:
        assert response.headers["Cache-Control"] == "no-store"
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Frame-Options"] == "DENY"
    async with dash.http.get(dash.url + "/admin/static/admin.css") as response:
        assert response.status == 200 and response.content_type == "text/css"


async def test_a_database_failure_is_a_503_page_and_the_rest_keeps_working(
    dash: Dashboard,
) -> None:
    await dash.say("hello", name="Zanzibar Quokka")
    await dash.login()
    async with dash.app.store.write() as session:
        await session.exec(text("DROP TABLE token_logs"))  # type: ignore[call-overload]
    status, body = await dash.page("/admin")
    assert status == 503 and "The database did not answer" in body
    assert "token_logs" not in body and "Quokka" not in body  # no SQL, no data
    status, body = await dash.page("/admin/users")
    assert status == 200 and "Zanzibar Quokka" in body
    status, _ = await dash.page("/healthz")
    assert status == 200


async def test_many_wrong_tokens_close_the_login_form_but_not_bearer(dash: Dashboard) -> None:
    for _ in range(LOGIN_FAILURES):
        status, _ = await dash.post("/admin/login", {"token": "guess"})
        assert status == 401
    status, body = await dash.post("/admin/login", {"token": ADMIN_TOKEN})
    assert status == 429 and "Too many wrong tokens" in body
    assert COOKIE not in {c.key for c in dash.http.cookie_jar}
    status, _ = await dash.page("/admin", headers=dash.bearer())
    assert status == 200
    outcomes = [e.outcome for e in await audit_rows(dash)]
    assert outcomes == ["denied"] * LOGIN_FAILURES
