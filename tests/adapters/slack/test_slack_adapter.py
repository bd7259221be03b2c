"""The Slack adapter against the fake Slack, with a stand-in core: acknowledging
before the work, per-channel rate limits, delivery failures, typing status,
startup errors and configuration."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from adapters.slack import SlackAdapter, create_adapter
from bot.config import Secrets, Settings, SlackSettings
from bot.errors import ConfigError, DeliveryFailed, ShuttingDown, StartupError
from bot.ports import CommandInfo, Core
from bot.types import IncomingMessage, Outcome, Reply, Target
from bot.web.server import WebServer
from tests.adapters.slack.support import (
    command_payload,
    dm,
)
from tests.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack, signed_headers
from tests.harness import SoleLeader

pytest_plugins = ("tests.adapters.slack.fixtures",)


@dataclass
class GateCore:
    """A core whose `handle` waits until the test opens the gate."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[tuple[IncomingMessage, bool]] = field(default_factory=list)

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        self.received.append((msg, deliver))
        if on_accepted is not None:  # stored, as the pipeline's inbox would
            on_accepted()
        self.started.set()
        await self.gate.wait()
        return Outcome("ignored")

    def command_infos(self) -> Sequence[CommandInfo]:
        return []

    def leadership(self, name: str) -> SoleLeader:
        return SoleLeader()


@dataclass
class Clock:
    """An `asyncio.sleep` stand-in: records waits; blocks while `hold` is clear."""

    waits: list[float] = field(default_factory=list)
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.hold.set()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waiting.set()
        await self.hold.wait()


def settings(slack: FakeSlack, **values: Any) -> SlackSettings:
    return SlackSettings.model_validate(
        {"enabled": True, "mode": "http", "api_base_url": slack.api_url, **values}
    )


@pytest.fixture
async def started(slack: FakeSlack) -> AsyncIterator[Any]:
    """Start adapters (with a GateCore and a Clock) behind a web server."""
    made: list[tuple[SlackAdapter, WebServer]] = []

    async def factory(core: Core | None = None, **values: Any) -> tuple[SlackAdapter, Any]:
        clock = Clock()
        adapter = SlackAdapter(
            settings(slack, **values),
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN,
            signing_secret=SIGNING_SECRET,
            sleep=clock.sleep,
        )
        web = WebServer("127.0.0.1", 0)
        web.add_routes(adapter.routes())
        await web.start()
        made.append((adapter, web))
        await adapter.start(core or GateCore())
        return adapter, (web, clock)

    yield factory
    for adapter, web in made:
        await adapter.stop()
        await web.stop()


async def post_event(url: str, body: dict[str, Any]) -> int:
    raw = json.dumps(body)
    headers = {"Content-Type": "application/json", **signed_headers(raw)}
    async with aiohttp.ClientSession() as http, http.post(url, data=raw, headers=headers) as r:
        return r.status


async def test_events_are_acknowledged_before_the_agent_runs(started):
    core = GateCore()
    adapter, (web, _) = await started(core)

    status = await post_event(f"{web.url}/slack/events", dm("take your time"))
    assert status == 200
    await core.started.wait()
    assert not core.gate.is_set()  # acknowledged while the agent is still working

    ((msg, deliver),) = core.received
    assert (msg.text, msg.chat_type, deliver) == ("take your time", "direct", True)
    core.gate.set()
    await adapter.idle()


@dataclass
class ClosedCore(GateCore):
    """A core that cannot store anything (shutting down, database down)."""

    async def handle(
        self,
        msg: IncomingMessage,
        *,
        deliver: bool = True,
        on_accepted: Callable[[], None] | None = None,
    ) -> Outcome:
        raise ShuttingDown("shutting down: not taking messages")


async def test_an_event_not_stored_is_refused_for_a_retry_without_an_error_line(started, caplog):
    """A message the core cannot store is answered 500 (Slack delivers it again):
    an expected moment (a shutdown, a database restart), a warning, not an ERROR
    line with bolt's traceback ("Failed to run listener function")."""
    _, (web, _) = await started(ClosedCore())

    status = await post_event(f"{web.url}/slack/events", dm("are you there?"))

    assert status == 500
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any(r.getMessage().startswith("slack.not_taken") for r in caplog.records)


async def test_slash_commands_are_acknowledged_before_they_run(started, slack):
    core = GateCore()
    adapter, (web, _) = await started(core)
    raw = urlencode(command_payload(slack, "budget"))
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(raw)}
    url = f"{web.url}/slack/commands"
    async with aiohttp.ClientSession() as http, http.post(url, data=raw, headers=headers) as r:
        assert (r.status, await r.text()) == (200, "")
    await core.started.wait()
    ((msg, deliver),) = core.received
    assert (msg.text, deliver) == ("/budget", False)
    core.gate.set()
    await adapter.idle()


async def test_requests_before_start_are_refused_with_503_unless_refused_anyway(slack):
    """Slack delivers a 503'd request again; one that fails the signature or
    the shape check is refused for good (401, 400), also before the start."""
    adapter = SlackAdapter(settings(slack), bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    web = WebServer("127.0.0.1", 0)
    web.add_routes(adapter.routes())
    await web.start()
    url = f"{web.url}/slack/events"
    try:
        assert await post_event(url, dm("too early")) == 503
        unsigned = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=json.dumps(dm("who")), headers=unsigned) as r:
                assert r.status == 401
            raw = "[1, 2]"  # signed, but no Slack request
            headers = {"Content-Type": "application/json", **signed_headers(raw)}
            async with http.post(url, data=raw, headers=headers) as r:
                assert r.status == 400
    finally:
        await web.stop()


async def test_socket_mode_serves_no_routes(slack):
    socket = SlackAdapter(settings(slack, mode="socket"), bot_token=BOT_TOKEN, app_token=APP_TOKEN)
    http = SlackAdapter(settings(slack), bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    assert socket.routes() == []
    assert [(r.method, r.path) for r in http.routes()] == [
        ("POST", "/slack/events"),
        ("POST", "/slack/commands"),
        ("POST", "/slack/interactivity"),
    ]


def reply(text: str, channel: str = "C1", thread: str | None = "1.1") -> Reply:
    return Reply(text, Target("slack", channel, thread_id=thread))


async def test_a_rate_limited_channel_does_not_hold_up_the_others(started, slack):
    adapter, (_, clock) = await started()
    clock.hold.clear()
    slack.fail("chat.postMessage", status=429, retry_after=30, channel="C1")

    slow = asyncio.create_task(adapter.send(reply("to the busy channel", "C1")))
    await clock.waiting.wait()
    assert clock.waits == [30.0]  # Retry-After honoured
    assert await adapter.send(reply("elsewhere", "C2")) != []  # C2 is not blocked
    assert [m["channel"] for m in slack.messages] == ["C2"]

    clock.hold.set()
    assert len(await slow) == 1
    assert [(m["channel"], m["text"]) for m in slack.messages] == [
        ("C2", "elsewhere"),
        ("C1", "to the busy channel"),
    ]


async def test_parts_of_one_reply_stay_in_order_in_the_thread(started, slack):
    adapter, (_, clock) = await started()
    slack.fail("chat.postMessage", status=429, retry_after=2, times=2)
    text = "\n\n".join(f"Part {i} " + "x" * 1500 for i in range(6))
    ids = await adapter.send(reply(text, thread="7.7"))

    assert len(ids) == len(slack.messages) > 1
    assert [m["ts"] for m in slack.messages] == ids
    assert {m["thread_ts"] for m in slack.messages} == {"7.7"}
    joined = "\n\n".join(m["text"] for m in slack.messages)
    assert [joined.index(f"Part {i}") for i in range(6)] == sorted(
        joined.index(f"Part {i}") for i in range(6)
    )
    assert clock.waits == [2.0, 2.0]


@pytest.mark.parametrize(
    ("failure", "calls", "waits", "reason"),
    [
        ({"error": "channel_not_found"}, 1, [], "channel_not_found"),
        ({"status": 429, "retry_after": 3600}, 1, [], "Retry-After 3600s"),
        ({"status": 429, "retry_after": 1, "times": 5}, 5, [1.0] * 4, "rate limited"),
        ({"status": 503, "times": 5}, 5, [1.0, 2.0, 4.0, 8.0], "HTTP 503"),
    ],
)
async def test_delivery_failures(started, slack, failure, calls, waits, reason):
    adapter, (_, clock) = await started()
    slack.fail("chat.postMessage", **failure)
    with pytest.raises(DeliveryFailed, match=reason):
        await adapter.send(reply("hello"))
    assert len(slack.calls_to("chat.postMessage")) == calls
    assert clock.waits == waits
    assert slack.messages == []


async def test_a_server_error_is_retried(started, slack):
    adapter, (_, clock) = await started()
    slack.fail("chat.postMessage", status=500)
    assert len(await adapter.send(reply("eventually"))) == 1
    assert clock.waits == [1.0]


async def test_a_failed_part_says_which(started, slack):
    adapter, _ = await started()
    text = "\n\n".join("y" * 3000 for _ in range(3))
    slack.fail("chat.postMessage", error="is_archived", after=1)  # archived after part 1
    with pytest.raises(DeliveryFailed, match=r"is_archived \(part 2 of 3; 1 sent\)"):
        await adapter.send(reply(text))
    assert len(slack.messages) == 1


async def test_empty_replies_send_nothing(started, slack):
    adapter, _ = await started()
    assert await adapter.send(reply("   ")) == []
    assert slack.calls_to("chat.postMessage") == []


async def test_typing_status_in_threads(started, slack):
    adapter, _ = await started(typing_status="is thinking…")
    await adapter.show_typing(Target("slack", "C1", thread_id="5.5"))
    await adapter.show_typing(Target("slack", "D1"))  # no thread: nothing to set
    (call,) = slack.calls_to("assistant.threads.setStatus")
    assert call.args == {"channel_id": "C1", "thread_ts": "5.5", "status": "is thinking…"}

    slack.fail("assistant.threads.setStatus", error="not_allowed", channel="C2")
    await adapter.show_typing(Target("slack", "C2", thread_id="6.6"))
    await adapter.show_typing(Target("slack", "C2", thread_id="6.6"))  # not asked again
    assert len(slack.calls_to("assistant.threads.setStatus")) == 2


async def test_typing_status_is_off_by_default(started, slack):
    adapter, _ = await started()
    await adapter.show_typing(Target("slack", "C1", thread_id="5.5"))
    assert slack.calls_to("assistant.threads.setStatus") == []


async def test_a_rejected_bot_token_stops_the_start(slack):
    adapter = SlackAdapter(settings(slack), bot_token="xoxb-wrong", signing_secret="s")
    with pytest.raises(StartupError, match=r"SLACK_BOT_TOKEN \(auth.test\): invalid_auth"):
        await adapter.start(GateCore())
    assert adapter._http is None  # nothing left open


async def test_a_rejected_app_token_stops_the_start(slack):
    adapter = SlackAdapter(
        settings(slack, mode="socket"), bot_token=BOT_TOKEN, app_token="xapp-1-wrong"
    )
    with pytest.raises(StartupError, match=r"SLACK_APP_TOKEN \(apps.connections.open\): inv"):
        await adapter.start(GateCore())
    assert adapter._http is None


async def test_an_unreachable_slack_stops_the_start():
    dead = SlackSettings(enabled=True, mode="http", api_base_url="http://127.0.0.1:9/api/")
    adapter = SlackAdapter(dead, bot_token=BOT_TOKEN, signing_secret="s")
    with pytest.raises(StartupError, match="cannot reach Slack"):
        await adapter.start(GateCore())


def secrets(**values: str) -> Secrets:
    return Secrets.model_validate(values)


@pytest.mark.parametrize(
    ("mode", "given", "message"),
    [
        ("socket", {"slack_app_token": APP_TOKEN}, "SLACK_BOT_TOKEN is not set"),
        ("socket", {"slack_bot_token": BOT_TOKEN}, "SLACK_APP_TOKEN is not set"),
        ("http", {"slack_bot_token": BOT_TOKEN}, "SLACK_SIGNING_SECRET is not set"),
        ("socket", {"slack_bot_token": BOT_TOKEN, "slack_app_token": BOT_TOKEN}, "xapp-"),
        ("http", {"slack_bot_token": APP_TOKEN, "slack_signing_secret": SIGNING_SECRET}, "xox"),
    ],
)
def test_missing_or_mixed_up_secrets(mode: str, given: dict[str, str], message: str):
    config = Settings.model_validate({"slack": {"enabled": True, "mode": mode}})
    with pytest.raises(ConfigError, match=message) as caught:
        create_adapter(config, secrets(**given))
    assert "\n" not in str(caught.value)
    for value in given.values():
        assert value not in str(caught.value)


def test_create_adapter_per_mode():
    both = secrets(
        slack_bot_token=BOT_TOKEN, slack_app_token=APP_TOKEN, slack_signing_secret=SIGNING_SECRET
    )
    http = create_adapter(Settings.model_validate({"slack": {"mode": "http"}}), both)
    socket = create_adapter(Settings(), both)
    assert http.settings.mode == "http" and socket.settings.mode == "socket"
    assert http.client.base_url == "https://slack.com/api/"


def test_api_base_url_gets_its_trailing_slash():
    assert SlackSettings(api_base_url="http://127.0.0.1:1/api").api_base_url.endswith("/api/")
    with pytest.raises(ValueError):
        SlackSettings(api_base_url="slack.com/api")


async def test_the_fake_answers_like_the_web_api(slack):
    """The fake's own contract, through the real slack_sdk client."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
    posted = await client.chat_postMessage(channel="C1", text="first")
    updated = await client.chat_update(channel="C1", ts=posted["ts"], text="edited")
    assert updated["ts"] == posted["ts"] and slack.messages[0]["text"] == "edited"
    for bad, error in [
        (AsyncWebClient(base_url=slack.api_url), "not_authed"),
        (AsyncWebClient(token="xoxb-nope", base_url=slack.api_url), "invalid_auth"),
    ]:
        with pytest.raises(SlackApiError) as caught:
            await bad.auth_test()
        assert caught.value.response["error"] == error
    with pytest.raises(SlackApiError) as caught:
        await client.apps_connections_open(app_token=BOT_TOKEN)
    assert caught.value.response["error"] == "not_allowed_token_type"
    with pytest.raises(SlackApiError) as caught:
        await client.chat_update(channel="C1", ts="0.0", text="x")
    assert caught.value.response["error"] == "message_not_found"
