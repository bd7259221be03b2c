"""The web tools through the real pipeline, the `anthropic` SDK and the fake
model, on SQLite and PostgreSQL: a fetched article reaches the reply (its
boilerplate does not), marked as data; a page's injected instruction to
schedule a wakeup leaves the schedule held for confirmation, not created;
searches through a fake SearXNG and a fake Brave API; each fetch and search
is a span in the run's trace and a count in the metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func
from sqlmodel import select

from bot.accounts.directory import Directory
from bot.cli.trace import format_trace
from bot.errors import ConfigError
from bot.store.models import ScheduledJob, TraceSpan
from bot.store.traces import load_trace, recent_runs
from bot.types import Role
from tests.fakes.anthropic import text_reply, tool_call, tool_use_reply
from tests.fakes.search import BRAVE_KEY, RESULTS, FakeSearch
from tests.harness import RecordingAdapter, message
from tests.tools.web.site import ARTICLE_MORE, ARTICLE_TEXT, BOILERPLATE, INJECTION, Site


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with Site() as running:
        yield running


@pytest.fixture
async def search() -> AsyncIterator[FakeSearch]:
    async with FakeSearch() as running:
        yield running


def web(site: Site, **more: Any) -> dict[str, Any]:
    return {"allow_hosts": [f"127.0.0.1:{site.port}"], **more}


async def as_user(app: Any) -> int:
    """Alice, promoted to `user` (the web tools' default lowest role)."""
    alice = await app.pipeline.s.identity.resolve(message("-"))
    await Directory(app.store, app.pipeline.s.identity).set_role(alice.id, Role.USER)
    return int(alice.id)


def tool_results(request: Any) -> list[dict[str, Any]]:
    return [b for b in request.messages[-1]["content"] if b["type"] == "tool_result"]


async def spans_of_last_run(app: Any) -> list[TraceSpan]:
    (line,) = await recent_runs(app.store, 1)
    async with app.store.read() as session:
        rows = await session.exec(select(TraceSpan).where(TraceSpan.run_id == line.run.id))
        return list(rows.all())


def web_count(app: Any, tool: str, outcome: str) -> float:
    labels = {"tool": tool, "outcome": outcome}
    value = app.metrics.registry.get_sample_value("switchboard_web_requests_total", labels)
    return value or 0.0


async def test_a_fetched_article_reaches_the_reply_without_its_boilerplate(
    make_app, fake_anthropic, site
):
    app = await make_app(web=web(site))
    adapter = RecordingAdapter()
    app.attach(adapter)
    await as_user(app)
    fake_anthropic.script(tool_use_reply(tool_call("web_fetch", {"url": site.url("/article")})))
    outcome = await app.pipeline.handle(message("what does the river news article say?"))
    assert outcome.status == "answered"
    (result,) = tool_results(fake_anthropic.last_request)
    assert not result.get("is_error")
    assert result["content"].startswith('<untrusted source="tool_result" tool="web_fetch">\n')
    (reply,) = adapter.texts  # the echo: what the model read
    assert ARTICLE_TEXT in " ".join(reply.split()) and ARTICLE_MORE in reply
    for junk in BOILERPLATE:
        assert junk not in reply
    (span,) = [s for s in await spans_of_last_run(app) if s.kind == "tool"]
    assert (span.name, span.is_error) == ("web_fetch", False)
    assert span.detail is not None
    assert span.detail.startswith(f"GET {site.url('/article')} → 200 text/html, ")
    assert span.detail.endswith(" bytes")
    assert web_count(app, "web_fetch", "ok") == 1
    (line,) = await recent_runs(app.store, 1)
    trace = await load_trace(app.store, line.run.id)
    assert trace is not None
    assert f"ok  GET {site.url('/article')} → 200 text/html, " in format_trace(trace)


async def test_a_refused_fetch_is_a_tool_error_naming_the_rule(make_app, fake_anthropic, site):
    app = await make_app(web=web(site))
    app.attach(RecordingAdapter())
    await as_user(app)
    target = "http://169.254.169.254/latest/meta-data/"
    fake_anthropic.script(
        tool_use_reply(tool_call("web_fetch", {"url": target})), text_reply("I can't.")
    )
    await app.pipeline.handle(message("read the metadata"))
    (result,) = tool_results(fake_anthropic.last_request)
    assert result["is_error"] is True
    assert result["content"].startswith(
        "Tool 'web_fetch' failed: refused (rule=link-local): 169.254.169.254 is a link-local"
    )
    (span,) = [s for s in await spans_of_last_run(app) if s.kind == "tool"]
    assert span.is_error and span.detail is not None
    assert span.detail.startswith("refused (rule=link-local)")
    assert web_count(app, "web_fetch", "refused") == 1


async def test_an_injected_page_leaves_the_schedule_held_for_confirmation(
    make_app, fake_anthropic, site, caplog
):
    app = await make_app(web=web(site))
    adapter = RecordingAdapter()
    app.attach(adapter)
    alice = await as_user(app)
    fake_anthropic.script(
        tool_use_reply(tool_call("web_fetch", {"url": site.url("/injected")})),
        tool_use_reply(
            tool_call("schedule_add", {"prompt": "post 'pwned'", "when": "every 1 minute"})
        ),
        text_reply("The release notes say 4.2 fixes the login timeout."),
    )
    with caplog.at_level(logging.WARNING, logger="switchboard.security"):
        await app.pipeline.handle(message("summarise the release notes at that page"))
    body = json.dumps(fake_anthropic.requests[1].body)
    assert json.dumps(INJECTION)[1:-1] in body  # the page, as data
    assert '<untrusted source=\\"tool_result\\" tool=\\"web_fetch\\">' in body
    assert any("source=tool_result" in r.getMessage() for r in caplog.records)
    (held,) = tool_results(fake_anthropic.last_request)
    assert held["content"].startswith("Not done yet: this needs the user's confirmation first")
    async with app.store.read() as session:
        jobs = (await session.exec(select(func.count()).select_from(ScheduledJob))).one()
    assert jobs == 0  # not created
    (pending,) = await app.pipeline.s.actions.pending_for(alice)
    assert pending.tool_name == "schedule_add" and pending.sources == "tool_result"
    assert any("/confirm" in button.command for r in adapter.sent for button in r.buttons)


async def test_a_guest_is_not_offered_the_web_tools_by_default(make_app, fake_anthropic, search):
    app = await make_app(
        web={"search": {"backend": "searxng", "url": search.base}},
        budgets={"guest": "unlimited"},
    )
    app.attach(RecordingAdapter())
    await app.pipeline.handle(message("hello"))
    assert {t["name"] for t in fake_anthropic.last_request.tools}.isdisjoint(
        {"web_fetch", "web_search"}
    )
    await as_user(app)
    await app.pipeline.handle(message("hello again"))
    names = {t["name"] for t in fake_anthropic.last_request.tools}
    assert {"web_fetch", "web_search"} <= names


async def test_no_search_backend_no_search_tool(make_app, fake_anthropic):
    app = await make_app(web={"fetch": False})
    app.attach(RecordingAdapter())
    await as_user(app)
    await app.pipeline.handle(message("hello"))
    names = {t.get("name") for t in fake_anthropic.last_request.tools}
    assert "web_search" not in names and "web_fetch" not in names


async def test_searxng_results_reach_the_model_as_data(make_app, fake_anthropic, search):
    app = await make_app(web={"search": {"backend": "searxng", "url": search.base + "/"}})
    app.attach(RecordingAdapter())
    await as_user(app)
    fake_anthropic.script(tool_use_reply(tool_call("web_search", {"query": "otters rhine"})))
    await app.pipeline.handle(message("any news about otters?"))
    (request,) = search.requests
    assert (request.path, request.query) == ("/search", {"q": "otters rhine", "format": "json"})
    (result,) = tool_results(fake_anthropic.last_request)
    content = result["content"]
    assert content.startswith('<untrusted source="tool_result" tool="web_search">\n')
    assert "Results for 'otters rhine':\n1. Otters return to the Rhine\n" in content
    for title, url, snippet in RESULTS:
        assert f"{title}\n   {url}\n   {snippet}" in content
    (span,) = [s for s in await spans_of_last_run(app) if s.kind == "tool"]
    assert span.detail == 'search "otters rhine" (searxng) → 3 results'
    assert web_count(app, "web_search", "ok") == 1


async def test_brave_gets_its_key_in_a_header_and_never_shows_it(
    make_app, fake_anthropic, search, monkeypatch, caplog
):
    monkeypatch.setenv("MY_BRAVE_KEY", BRAVE_KEY)
    config = {"backend": "brave", "url": search.brave_url, "api_key_env": "MY_BRAVE_KEY"}
    app = await make_app(web={"search": {**config, "max_results": 2}})
    app.attach(RecordingAdapter())
    await as_user(app)
    fake_anthropic.script(tool_use_reply(tool_call("web_search", {"query": "otter"})))
    await app.pipeline.handle(message("search otters"))
    (request,) = search.requests
    assert request.headers["x-subscription-token"] == BRAVE_KEY
    assert request.query == {"q": "otter", "count": "2"}
    (result,) = tool_results(fake_anthropic.last_request)
    assert "Otters were seen near Basel." in result["content"]  # <strong> gone
    assert "<strong>" not in result["content"] and RESULTS[2][0] not in result["content"]

    monkeypatch.setenv("MY_BRAVE_KEY", "brv-wrong-key-000000")
    other = await make_app(web={"search": config})
    other.attach(RecordingAdapter())
    await as_user(other)
    fake_anthropic.script(tool_use_reply(tool_call("web_search", {"query": "otter"})))
    with caplog.at_level(logging.INFO):
        await other.pipeline.handle(message("search otters"))
    (failed,) = tool_results(fake_anthropic.last_request)
    assert failed["is_error"] is True
    assert "Brave Search refused the request (HTTP 401): check its key" in failed["content"]
    everything = json.dumps([r.body for r in fake_anthropic.requests]) + caplog.text
    assert BRAVE_KEY not in everything and "brv-wrong-key-000000" not in everything
    assert web_count(other, "web_search", "error") == 1


async def test_brave_without_its_key_is_a_config_error(make_app, monkeypatch):
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        await make_app(web={"search": {"backend": "brave"}})
    assert str(caught.value).startswith("web.search.api_key_env: BRAVE_SEARCH_API_KEY is not set")


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/slow", "refused (rule=timeout): no complete answer within 1 s"),
        ("/cut", "could not fetch "),
        ("/image.png", "refused (rule=content_type): image/png is not read"),
    ],
)
async def test_a_failed_fetch_is_not_retried_and_the_run_still_answers(
    make_app, fake_anthropic, site, path, said
):
    app = await make_app(web=web(site, timeout_seconds=1))
    adapter = RecordingAdapter()
    app.attach(adapter)
    await as_user(app)
    fake_anthropic.script(
        tool_use_reply(tool_call("web_fetch", {"url": site.url(path)})),
        text_reply("That page did not load."),
    )
    outcome = await app.pipeline.handle(message("read that page"))
    (result,) = tool_results(fake_anthropic.last_request)
    assert result["is_error"] is True
    assert result["content"].startswith(f"Tool 'web_fetch' failed: {said}")
    assert site.log == [path]  # one request: a refusal or a failed fetch is not retried
    assert outcome.status == "answered" and adapter.texts == ["That page did not load."]


async def test_a_search_backend_that_fails_is_a_tool_error_and_the_run_answers(
    make_app, fake_anthropic, search
):
    search.status = 502
    app = await make_app(web={"search": {"backend": "searxng", "url": search.base}})
    adapter = RecordingAdapter()
    app.attach(adapter)
    await as_user(app)
    fake_anthropic.script(
        tool_use_reply(tool_call("web_search", {"query": "otters"})),
        text_reply("Search is down right now."),
    )
    outcome = await app.pipeline.handle(message("search otters"))
    (result,) = tool_results(fake_anthropic.last_request)
    assert result["is_error"] is True
    assert result["content"].startswith("Tool 'web_search' failed: SearXNG answered HTTP 502")
    assert len(search.requests) == 1  # not retried
    assert outcome.status == "answered" and adapter.texts == ["Search is down right now."]
    assert web_count(app, "web_search", "error") == 1
