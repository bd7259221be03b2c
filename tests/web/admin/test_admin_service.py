"""The dashboard of the real service (`switchboard run` as a subprocess) after
Slack messages were answered: the overview's numbers agree with what the
service counted in `/metrics`; the users page lists the Slack users; a login
through the form works; nothing without credentials; the token never appears
in the service's logs."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from tests.web.admin.conftest import ADMIN_TOKEN
from tests.web.admin.live import BEARER, MESSAGES, figure, live_service
from tests.web.scrape import scrape, value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
RUNS_FINISHED = "switchboard_run_duration_seconds_count"


async def test_overview_of_the_running_service(tmp_path: Path) -> None:
    async with live_service(tmp_path) as live:
        body = await live.overview()
        _, samples = await scrape(live.http, live.service)
        async with live.http.get(live.url + "/admin/users", headers=BEARER) as response:
            users = await response.text()
        async with live.http.get(live.url + "/admin/runs", headers=BEARER) as response:
            runs = await response.text()
        async with live.http.get(live.url + "/admin") as response:
            anonymous = response.status, await response.text()
        jar = aiohttp.CookieJar(unsafe=True)
        async with (
            aiohttp.ClientSession(cookie_jar=jar) as browser,
            browser.post(live.url + "/admin/login", data={"token": ADMIN_TOKEN}) as response,
        ):  # follows the redirect to the overview
            assert response.status == 200 and str(response.url).endswith("/admin")
            logged_in = await response.text()
        logs = live.service.log_text

    tokens = sum(
        value(samples, "switchboard_llm_tokens_total", kind=kind)
        for kind in ("input", "output", "cache_read", "cache_write")
    )
    assert tokens > 0
    assert figure(body, "messages-total") == str(len(MESSAGES))
    assert figure(body, "tokens-total") == f"{int(tokens):,}"
    assert figure(body, "cost-month") == (
        f"${value(samples, 'switchboard_llm_cost_usd_total'):.4f}"
    )
    assert figure(body, "inbox-depth") == "0"
    assert figure(body, "failures-week") == "0"
    top = re.search(r'<table id="top-users">(.*?)</table>', body, re.S)
    assert top is not None and top[1].count("<tr>") == 3  # header + alice + bob
    assert top[1].index("UALICE0001") < top[1].index("UBOB000002")
    assert "slack:UALICE0001" in users and "slack:UBOB000002" in users
    finished = sum(v for (name, _), v in samples.items() if name == RUNS_FINISHED)
    assert 2 <= runs.count('href="/admin/runs/') == finished  # a message may join a run
    assert anonymous[0] == 401 and "UALICE0001" not in anonymous[1]
    assert figure(logged_in, "messages-total") == str(len(MESSAGES))
    assert ADMIN_TOKEN not in logs
