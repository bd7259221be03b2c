"""The refusal matrix through the running service (`switchboard run` as a
subprocess, Slack in HTTP mode, the model at the fake): for each URL the
model asks `web_fetch` for, the tool's answer names the rule, and the target
— a local site on another port, which the fetch would reach if the guard
let it — never sees a connection (its own access log stays empty). One
allowed fetch shows the path works; `/metrics` counts both kinds."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import (
    FakeAnthropic,
    ScriptItem,
    last_user_text,
    text_reply,
    tool_call,
    tool_use_reply,
)
from tests.fakes.slack import FakeSlack
from tests.pipeline.test_crash_recovery import dm_event
from tests.service_rig import Service, SlackSender, free_port, service_env
from tests.tools.web.site import ARTICLE_MORE, BOILERPLATE, Site
from tests.web.scrape import scrape_until, value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

URL = re.compile(r"[a-z]+://\S+")


def loopback_name() -> str:
    """A name other than `localhost` that /etc/hosts maps to a loopback
    address (resolved by the system, never by outside DNS); else
    `localhost.localdomain`-style fallbacks are not relied on: `localhost`."""
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        return "localhost"
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0].startswith("127."):
            for name in fields[1:]:
                if name != "localhost" and "." not in name.strip("."):
                    return name
    return "localhost"


def matrix(allowed: int, target: int) -> list[tuple[str, str, str]]:
    """(what, URL, the rule its refusal must name); every URL aims at the target."""
    secret = f":{target}/article"
    return [
        ("127.0.0.1 on another port", f"http://127.0.0.1{secret}", "loopback"),
        ("localhost", f"http://localhost{secret}", "loopback"),
        ("[::1]", f"http://[::1]{secret}", "loopback"),
        ("0.0.0.0", f"http://0.0.0.0{secret}", "unspecified"),
        ("2130706433", f"http://2130706433{secret}", "loopback"),
        ("0x7f.1", f"http://0x7f.1{secret}", "loopback"),
        ("127.1", f"http://127.1{secret}", "loopback"),
        ("[::ffff:127.0.0.1]", f"http://[::ffff:127.0.0.1]{secret}", "loopback"),
        (
            f"a name resolving to 127.0.0.1 ({loopback_name()})",
            f"http://{loopback_name()}{secret}",
            "loopback",
        ),
        (
            "a redirect from the allowed host to 127.0.0.1",
            f"http://127.0.0.1:{allowed}/to?url=http://127.0.0.1{secret}",
            "loopback",
        ),
        (
            "a redirect from the allowed host to localhost",
            f"http://127.0.0.1:{allowed}/to?url=http://localhost{secret}",
            "loopback",
        ),
        ("file://", "file:///etc/passwd", "scheme"),
        ("gopher://", f"gopher://127.0.0.1{secret}", "scheme"),
        ("a port not configured", f"http://localhost:{target + 1}/article", "port"),
    ]


def respond(body: dict[str, Any]) -> ScriptItem:
    """Fetch the URL the user sent; once fetched, say so."""
    last = body["messages"][-1]
    content = last.get("content")
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return text_reply("fetched")
    found = URL.search(last_user_text(body))
    assert found is not None, last_user_text(body)
    return tool_use_reply(tool_call("web_fetch", {"url": found.group(0).rstrip(">")}))


def results(model: FakeAnthropic) -> dict[str, dict[str, Any]]:
    """URL the model asked for → the tool result it got back."""
    found: dict[str, dict[str, Any]] = {}
    for request in model.requests:
        messages = request.messages
        if len(messages) < 2 or not isinstance(messages[-1].get("content"), list):
            continue
        calls = {
            b["id"]: b["input"]["url"]
            for b in messages[-2]["content"]
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        for block in messages[-1]["content"]:
            if block.get("type") == "tool_result" and block["tool_use_id"] in calls:
                found[calls[block["tool_use_id"]]] = block
    return found


async def test_the_refusal_matrix_through_the_running_service(tmp_path: Path) -> None:
    async with (
        FakeAnthropic(api_key=TEST_API_KEY, responder=respond) as model,
        FakeSlack() as slack,
        Site() as allowed,
        Site() as target,
    ):
        cases = matrix(allowed.port, target.port)
        port = free_port()
        env = service_env(
            Database("sqlite", tmp_path),
            model,
            slack,
            port,
            SWITCHBOARD__WEB__ALLOW_HOSTS=json.dumps([f"127.0.0.1:{allowed.port}"]),
            SWITCHBOARD__WEB__PORTS=json.dumps([80, 443, target.port]),
            SWITCHBOARD__WEB__MIN_ROLE="guest",
            SWITCHBOARD__STREAMING__ENABLED="false",
        )
        service = Service(env, tmp_path, port)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                sender = SlackSender(http, [service.url])
                urls = [url for _, url, _ in cases] + [allowed.url("/article")]
                for k, url in enumerate(urls, 1):
                    ts = f"17000{k:05d}.000001"
                    await sender.deliver(dm_event(f"D{k:03d}", "UALICE0001", url, ts))
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 120
                while len(results(model)) < len(urls):
                    if loop.time() > deadline:
                        raise AssertionError(
                            f"{len(results(model))} of {len(urls)} fetches answered\n"
                            + service.log_text
                        )
                    await asyncio.sleep(0.1)
                refused = float(len(cases))

                def counted(s: Any) -> bool:
                    ok = value(s, "switchboard_web_requests_total", tool="web_fetch", outcome="ok")
                    no = value(
                        s, "switchboard_web_requests_total", tool="web_fetch", outcome="refused"
                    )
                    return ok == 1 and no == refused

                await scrape_until(http, service, counted, "every fetch counted")
        finally:
            await service.stop()

    got = results(model)
    report = []
    for what, url, rule in cases:
        result = got[url]
        content = str(result["content"])
        report.append(f"{what}: {content}")
        assert result.get("is_error") is True, (what, content)
        assert content.startswith(f"Tool 'web_fetch' failed: refused (rule={rule}): "), (
            what,
            content,
        )
    assert target.log == [], target.log  # no connection ever reached the target
    assert allowed.log.count("/article") == 1  # the one allowed fetch
    article = str(got[allowed.url("/article")]["content"])
    assert ARTICLE_MORE in article and not any(junk in article for junk in BOILERPLATE)
    logged = "\n".join(service.logs)
    assert logged.count("web.refused tool=web_fetch rule=") == len(cases)
    assert ARTICLE_MORE not in logged  # a page's content never goes to the log
    print("\n".join(report))
