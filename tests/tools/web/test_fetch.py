"""`web_fetch` against a real local site (127.0.0.1, allowed by `[web]
allow_hosts`): what comes back for each kind of page, redirects checked
again, the caps, TLS through the pinned connection, metrics and logs."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trustme

from bot.config import WebSettings
from bot.errors import ToolFailed
from bot.metrics import Metrics
from bot.ports import ToolContext, ToolOutput
from bot.tools.web import WebTools, web_tools
from bot.tools.web.guard import Refused
from bot.types import Role
from tests.tools.web.site import (
    ARTICLE_MORE,
    ARTICLE_TEXT,
    BIG_BYTES,
    BOILERPLATE,
    PDF_TEXT,
    Site,
)

CTX = ToolContext(1, Role.USER, 1, "console:room", "console", "run_fetch")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with Site() as running:
        yield running


@pytest.fixture
async def target() -> AsyncIterator[Site]:
    """Another local site that no fetch may reach."""
    async with Site() as running:
        yield running


class Fetched(str):
    """What web_fetch gave the model, with its trace line."""

    trace: str

    def __new__(cls, text: str, trace: str) -> Fetched:
        made = super().__new__(cls, text)
        made.trace = trace
        return made


class Tools:
    def __init__(self, made: WebTools, metrics: Metrics) -> None:
        self.made, self.metrics = made, metrics
        self.fetch = made.tools[0]

    async def run(self, url: str, **args: Any) -> Fetched:
        out = await self.fetch.run({"url": url, **args}, CTX)
        assert isinstance(out, ToolOutput) and out.trace is not None
        return Fetched(out.text, out.trace)

    def count(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "switchboard_web_requests_total", {"tool": "web_fetch", "outcome": outcome}
        )
        return value or 0.0


@pytest.fixture
async def tools(site: Site) -> AsyncIterator[Tools]:
    metrics = Metrics()
    settings = WebSettings(
        allow_hosts=(f"127.0.0.1:{site.port}",), ports=(80, 443, site.port), timeout_seconds=2.0
    )
    made = web_tools(settings, {}, metrics)
    try:
        yield Tools(made, metrics)
    finally:
        await made.aclose()


async def test_an_article_comes_back_as_markdown_without_its_boilerplate(tools, site):
    out = await tools.run(site.url("/article"))
    assert out.startswith(f"URL: {site.url('/article')}\nTitle: Otters return to the Rhine\n")
    assert "Content-Type: text/html, " in out
    assert ARTICLE_TEXT in " ".join(out.split()) and ARTICLE_MORE in out
    assert "[Basel wildlife office](https://example.org/survey)" in out  # links kept
    assert f"[camera traps]({site.url('/tags/camera-traps')})" in out  # made absolute
    for junk in BOILERPLATE:
        assert junk not in out
    assert out.trace.startswith(f"GET {site.url('/article')} → 200 text/html, ")
    assert tools.count("ok") == 1


async def test_a_redirect_chain_is_followed_and_said(tools, site):
    out = await tools.run(site.url("/hop/3"))
    assert out.startswith(f"URL: {site.url('/article')} (redirected from {site.url('/hop/3')})\n")
    assert site.log == ["/hop/3", "/hop/2", "/hop/1", "/article"]
    assert "(from " in out.trace and "3 redirects" in out.trace


async def test_more_than_five_redirects_are_refused(tools, site):
    with pytest.raises(Refused) as caught:
        await tools.run(site.url("/loop"))
    assert str(caught.value) == "refused (rule=redirect): more than 5 redirects"
    assert site.log == ["/loop"] * 6
    assert tools.count("refused") == 1


async def test_a_redirect_to_a_loopback_address_is_refused_without_connecting(
    tools, site, target, caplog
):
    hidden = f"http://127.0.0.1:{target.port}/article"
    with caplog.at_level(logging.INFO, logger="switchboard.web"):
        with pytest.raises(Refused) as caught:
            await tools.run(site.url(f"/to?url={hidden}"))
        with pytest.raises(Refused) as by_name:  # the port is allowed: the address is not
            await tools.run(site.url(f"/to?url=http://localhost:{site.port}/article"))
    assert str(caught.value).startswith("refused (rule=loopback): 127.0.0.1 is a loopback")
    assert "(a redirect from " in str(caught.value)
    assert str(by_name.value).startswith(
        "refused (rule=loopback): localhost (resolves to 127.0.0.1) is a loopback address"
    )
    assert target.log == []
    assert site.log == [f"/to?url={hidden}", f"/to?url=http://localhost:{site.port}/article"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("web.refused")]
    assert len(lines) == 2 and all("tool=web_fetch rule=loopback" in line for line in lines)
    assert all(r.levelno == logging.INFO for r in caplog.records if "web.refused" in r.msg)


async def test_a_slow_page_times_out(tools, site):
    with pytest.raises(Refused) as caught:
        await tools.run(site.url("/slow"))
    assert str(caught.value) == "refused (rule=timeout): no complete answer within 2 s"
    assert tools.count("timeout") == 1


async def test_a_page_over_the_cap_is_cut_there_with_a_note(tools, site):
    out = await tools.run(site.url("/big"))
    cap = 2 * 1024 * 1024
    assert f"Content-Type: text/plain, {cap:,} bytes — only the first {cap:,} bytes" in out
    assert "cut at the size cap" in out.trace
    assert cap < BIG_BYTES
    assert tools.count("too_large") == 1


async def test_a_compressed_body_is_capped_as_it_is_decoded(tools, site):
    out = await tools.run(site.url("/gzip-bomb"), max_chars=1000)
    assert "only the first 2,097,152 bytes were read" in out
    assert "[… cut at 1,000 of 2,097,152 characters" in out


async def test_a_pdf_comes_back_as_text(tools, site):
    out = await tools.run(site.url("/doc.pdf"))
    assert "Title: Otter census\nContent-Type: application/pdf" in out
    assert PDF_TEXT in out


async def test_json_comes_back_as_it_is(tools, site):
    out = await tools.run(site.url("/data.json"))
    assert out.endswith('\n\n{"otters": 14, "river": "Rhine"}')


async def test_an_image_is_refused_by_its_content_type(tools, site):
    with pytest.raises(Refused) as caught:
        await tools.run(site.url("/image.png"))
    assert str(caught.value).startswith("refused (rule=content_type): image/png is not read")
    assert tools.count("refused") == 1


async def test_an_http_error_is_a_tool_error(tools, site):
    with pytest.raises(ToolFailed) as caught:
        await tools.run(site.url("/missing"))
    assert str(caught.value) == f"HTTP 404 Not Found from {site.url('/missing')}"
    assert tools.count("error") == 1


async def test_max_chars_caps_what_the_model_sees(tools, site):
    out = await tools.run(site.url("/article"), max_chars=120)
    text = out.split("\n\n", 1)[1]
    assert text.startswith("# Otters return to the Rhine") and "[… cut at 120 of " in text


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/_x", "ftp://a/b"])
async def test_other_schemes_are_refused(tools, url):
    with pytest.raises(Refused) as caught:
        await tools.run(url)
    assert caught.value.rule == "scheme"


class Names:
    """Stub names that resolve to 127.0.0.1 (the sites), lookups counted."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        if host not in self.names:
            raise OSError(-2, "Name or service not known")
        return ["127.0.0.1"]


async def test_a_name_is_resolved_once_a_connection_and_the_request_names_the_host(site):
    names = Names("pinned.test")
    settings = WebSettings(allow_hosts=(f"pinned.test:{site.port}",))
    made = web_tools(settings, {}, resolver=names)
    try:
        out = await made.tools[0].run({"url": f"http://pinned.test:{site.port}/hop/2"}, CTX)
    finally:
        await made.aclose()
    assert ARTICLE_MORE in str(out)
    # One lookup per connection (a redirect's unread body closes its connection),
    # none between the check and the connection.
    assert names.lookups == ["pinned.test"] * len(site.log) == ["pinned.test"] * 3
    assert site.hosts == [f"pinned.test:{site.port}"] * 3


async def test_tls_verifies_the_name_on_the_pinned_connection():
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("good.test").configure_cert(server)
    server_names: list[str | None] = []
    server.sni_callback = lambda sock, name, ctx: server_names.append(name)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    async with Site() as secure:
        await secure.close()
        await secure.start(ssl_context=server)
        names = Names("good.test", "evil.test")
        allow = (f"good.test:{secure.port}", f"evil.test:{secure.port}")
        made = web_tools(WebSettings(allow_hosts=allow), {}, resolver=names, ssl_context=client)
        try:
            good = await made.tools[0].run({"url": f"https://good.test:{secure.port}/article"}, CTX)
            with pytest.raises(ToolFailed) as evil:
                await made.tools[0].run({"url": f"https://evil.test:{secure.port}/article"}, CTX)
        finally:
            await made.aclose()
    assert ARTICLE_MORE in str(good)
    assert server_names[0] == "good.test"  # SNI: the name, though the socket went to an address
    assert "CERTIFICATE_VERIFY_FAILED" in str(evil.value) or "certificate" in str(evil.value)
    assert "evil.test" in server_names and secure.log == ["/article"]


async def test_a_connection_cut_halfway_is_an_error(tools, site):
    with pytest.raises(ToolFailed) as caught:
        await tools.run(site.url("/cut"))
    assert not isinstance(caught.value, Refused)
    assert str(caught.value).startswith(f"could not fetch {site.url('/cut')} (")
    assert tools.count("error") == 1


async def test_a_server_that_does_not_speak_http_is_an_error():
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff not http at all\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    made = web_tools(WebSettings(allow_hosts=(f"127.0.0.1:{port}",)), {})
    try:
        with pytest.raises(ToolFailed) as caught:
            await made.tools[0].run({"url": f"http://127.0.0.1:{port}/"}, CTX)
    finally:
        await made.aclose()
        server.close()
        await server.wait_closed()
    assert str(caught.value).startswith(f"could not fetch http://127.0.0.1:{port}/ (")
