"""Slack test helpers: the `Rig` (an App with the real Slack adapter, talking to
the fake Slack), payload builders, and signed delivery like Slack does it.
The fixtures that build rigs are in `tests/adapters/slack/fixtures.py`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from adapters.slack import SlackAdapter
from bot.app import App
from bot.config import Secrets
from tests.conftest import TEST_API_KEY
from tests.fakes.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER_ID,
    SIGNING_SECRET,
    FakeSlack,
    event_body,
    signed_headers,
)


def slack_secrets() -> Secrets:
    return Secrets.model_validate(
        {
            "anthropic_api_key": TEST_API_KEY,
            "slack_bot_token": BOT_TOKEN,
            "slack_app_token": APP_TOKEN,
            "slack_signing_secret": SIGNING_SECRET,
        }
    )


@dataclass
class Rig:
    app: App
    adapter: SlackAdapter
    slack: FakeSlack
    http: aiohttp.ClientSession
    closed: bool = False

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.app.close(drain_timeout=5)

    @property
    def url(self) -> str:
        assert self.app.web is not None
        return self.app.web.url

    async def post(
        self,
        path: str,
        body: str,
        content_type: str,
        *,
        secret: str = SIGNING_SECRET,
        timestamp: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        sent = {
            "Content-Type": content_type,
            **signed_headers(body, secret, timestamp=timestamp),
            **(headers or {}),
        }
        async with self.http.post(self.url + path, data=body.encode(), headers=sent) as response:
            return response.status, await response.text()

    async def event(self, body: Mapping[str, Any], **kwargs: Any) -> tuple[int, str]:
        """Deliver an Events API envelope to POST /slack/events."""
        return await self.post("/slack/events", json.dumps(body), "application/json", **kwargs)

    async def command(self, payload: Mapping[str, Any], **kwargs: Any) -> tuple[int, str]:
        """Deliver a slash command (form-encoded) to POST /slack/commands."""
        form = urlencode(dict(payload))
        return await self.post(
            "/slack/commands", form, "application/x-www-form-urlencoded", **kwargs
        )


def dm(text: str, *, ts: str = "1700000001.000100", user: str = "U0ALICE", **extra: Any) -> dict:
    return event_body(
        {
            "type": "message",
            "channel": "D0ALICE",
            "channel_type": "im",
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            **extra,
        }
    )


def channel_message(
    text: str, *, ts: str = "1700000002.000200", kind: str = "message", **extra: Any
) -> dict:
    event: dict[str, Any] = {
        "type": kind,
        "channel": "C0GENERAL",
        "user": "U0ALICE",
        "text": text,
        "ts": ts,
        "event_ts": ts,
        **extra,
    }
    if kind == "message":
        event["channel_type"] = "channel"
    return event_body(event)


def mention(text: str) -> str:
    return f"<@{BOT_USER_ID}> {text}"


def command_payload(slack: FakeSlack, text: str, **extra: Any) -> dict[str, str]:
    return {
        "token": "gIkuvaNzQIHg97ATvDxqgjtO",
        "team_id": slack.team_id,
        "team_domain": "example",
        "channel_id": "C0GENERAL",
        "channel_name": "general",
        "user_id": "U0ALICE",
        "user_name": "alice",
        "command": "/switchboard",
        "text": text,
        "response_url": slack.response_url(),
        "trigger_id": f"13345224609.738474920.{abs(hash(text)):x}",
        "api_app_id": "A0001",
        **extra,
    }
