"""The fault injection the soak relies on, in the fakes themselves
(tests/fakes/chaos.py): what each platform's client sees, and that a hung
call whose client gave up changes nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.chaos import Fault
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import DM_CHANNEL_ID, GUILD_ID, TOKEN
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.fakes.telegram import TOKEN as TELEGRAM_TOKEN
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram_updates import private


def only(name: str, fault: Fault) -> Any:
    return lambda called: fault if called == name else None


@pytest.mark.parametrize("status", [429, 503])
async def test_slack_answers_a_rate_limit_or_an_error_page_and_posts_nothing(status: int) -> None:
    async with FakeSlack() as slack:
        slack.chaos = only("chat.postMessage", Fault.status(status))
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        with pytest.raises(SlackApiError) as caught:
            await client.chat_postMessage(channel="C1", text="hello")
        assert caught.value.response.status_code == status
        if status == 429:
            assert caught.value.response.headers["Retry-After"] == "1"
        assert slack.messages == []
        await client.auth_test()  # other methods are not hit


async def test_slack_drops_a_hung_call_whose_client_gave_up_and_applies_one_that_waited() -> None:
    async with FakeSlack() as slack:
        slack.chaos = only("chat.postMessage", Fault.hang(1.0))
        impatient = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, timeout=0.2)
        with pytest.raises(asyncio.TimeoutError):
            await impatient.chat_postMessage(channel="C1", text="lost in transit")
        await slack.wait_for(lambda: bool(slack.dropped), within=10)
        assert slack.messages == []

        patient = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url, timeout=10)
        await patient.chat_postMessage(channel="C1", text="late but there")
        assert [m["text"] for m in slack.messages] == ["late but there"]


async def test_telegram_answers_flood_control_and_server_errors() -> None:
    async with FakeTelegram() as telegram, aiohttp.ClientSession() as http:
        url = f"{telegram.base_url}/bot{TELEGRAM_TOKEN}/sendMessage"
        for status in (429, 502):
            telegram.chaos = only("sendMessage", Fault.status(status))
            async with http.post(url, json={"chat_id": 42, "text": "hi"}) as response:
                body = await response.json()
            assert (response.status, body["ok"]) == (status, False)
        assert body["error_code"] == 502
        telegram.chaos = None
        async with http.post(url, json={"chat_id": 42, "text": "hi"}) as response:
            assert response.status == 200
        assert telegram.shown(42) == {1: "hi"}


async def test_telegram_webhook_deliveries_rotate_over_the_instances() -> None:
    """A load balancer in front of two instances: a failed attempt goes to the next."""
    got: dict[str, list[int]] = {"down": [], "up": []}

    def instance(name: str, status: int) -> web.Application:
        async def hook(request: web.Request) -> web.Response:
            got[name].append((await request.json())["update_id"])
            return web.Response(status=status)

        app = web.Application()
        app.router.add_post("/telegram/webhook", hook)
        return app

    runners = []
    urls = []
    for name, status in (("down", 503), ("up", 200)):
        runner = web.AppRunner(instance(name, status))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/telegram/webhook")
    try:
        async with FakeTelegram() as telegram, aiohttp.ClientSession() as http:
            telegram.webhook_targets = urls
            set_hook = f"{telegram.base_url}/bot{TELEGRAM_TOKEN}/setWebhook"
            async with http.post(set_hook, json={"url": "https://bot.example/hook"}) as response:
                assert response.status == 200
            first = telegram.push_update(private("one"))
            second = telegram.push_update(private("two"))
            await telegram.wait_taken(first, second, seconds=10)
    finally:
        for runner in runners:
            await runner.cleanup()
    assert got["up"] == [first, second]  # each answered 2xx once, in order
    assert set(got["down"]) <= {first, second} and got["down"]


async def identify(http: aiohttp.ClientSession, url: str, shard: list[int]) -> Any:
    ws = await http.ws_connect(url)
    hello = json.loads((await ws.receive()).data)
    assert hello["op"] == 10
    identity = {"token": TOKEN, "intents": 0, "shard": shard, "properties": {}}
    await ws.send_json({"op": 2, "d": identity})
    assert json.loads((await ws.receive()).data)["t"] == "READY"
    assert json.loads((await ws.receive()).data)["t"] == "GUILD_CREATE"
    return ws


async def test_discord_sends_a_sharded_session_only_its_shard_s_events() -> None:
    guild_shard = (int(GUILD_ID) >> 22) % 2
    async with FakeDiscord() as discord, aiohttp.ClientSession() as http:
        sessions = [await identify(http, discord.gateway_url, [k, 2]) for k in (0, 1)]
        await discord.dispatch("MESSAGE_CREATE", discord.user_message("in the guild"))
        dm = discord.user_message("in a DM", channel_id=DM_CHANNEL_ID, guild=False)
        await discord.dispatch("MESSAGE_CREATE", dm)
        for shard, ws in enumerate(sessions):
            expected = ["in a DM"] if shard == 0 else []
            if shard == guild_shard:
                expected = ["in the guild", *expected]
            seen = []
            while True:
                try:
                    frame = await ws.receive(timeout=0.5)
                except TimeoutError:
                    break
                seen.append(json.loads(frame.data)["d"]["content"])
            assert seen == expected, shard
            await ws.close()


async def test_discord_answers_a_rate_limit_and_posts_nothing() -> None:
    async with FakeDiscord() as discord, aiohttp.ClientSession() as http:
        discord.chaos = only("POST /channels/{channel}/messages", Fault.status(429))
        url = f"{discord.api_base_url}/channels/{DM_CHANNEL_ID}/messages"
        headers = {"Authorization": f"Bot {TOKEN}"}
        async with http.post(url, json={"content": "hi"}, headers=headers) as response:
            assert response.status == 429
            assert (await response.json())["retry_after"] == 1
        assert discord.posted == []
