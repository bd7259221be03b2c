"""Malformed input gets a 4xx, never a 5xx: every webhook endpoint of the real
service (`switchboard run` as a subprocess, Slack in HTTP mode and Telegram in
webhook mode) against bad signatures, bad bodies, oversize bodies and
wrong-shaped payloads. Afterwards the process still answers `/healthz` and a
good message; its log has one WARNING per rejection, no traceback, no ERROR and
no secret."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest

from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, last_user_text, text_reply
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, event_body, signed_headers
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.fakes.telegram_updates import private
from tests.pipeline.test_crash_recovery import wait_for
from tests.service_rig import Service, free_port, service_env
from tests.tiers import starts_the_service

pytestmark = pytest.mark.timeout(180)

WEBHOOK_SECRET = "hook-secret-for-the-tests_42"
MAX_BODY = 64 * 1024
EVENTS, COMMANDS, INTERACTIVITY = "/slack/events", "/slack/commands", "/slack/interactivity"
TELEGRAM = "/telegram/webhook"


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def signed(raw: str) -> dict[str, str]:
    return signed_headers(raw)


def slack_json(raw: str) -> dict[str, str]:
    return {"Content-Type": "application/json", **signed_headers(raw)}


def telegram_headers(secret: str | None = WEBHOOK_SECRET) -> dict[str, str]:
    headers: dict[str, str] = {}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    return headers


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: bytes
    headers: Callable[[str], dict[str, str]]
    """Headers for the body's text (so signatures can sign it)."""
    expected: int | tuple[int, ...]

    @property
    def content_type(self) -> str:
        if self.path in (COMMANDS, INTERACTIVITY):
            return "application/x-www-form-urlencoded"
        return "application/json"


def case(
    name: str,
    path: str,
    body: str | bytes,
    headers: Callable[[str], dict[str, str]],
    expected: int | tuple[int, ...],
) -> Case:
    raw = body if isinstance(body, bytes) else body.encode()
    return Case(name, path, raw, headers, expected)


def bad_signature(raw: str) -> dict[str, str]:
    return signed_headers(raw, "not-the-secret")


def stale_signature(raw: str) -> dict[str, str]:
    return signed_headers(raw, timestamp=1_000_000)


def non_numeric_timestamp(raw: str) -> dict[str, str]:
    headers = bad_signature(raw)
    headers["X-Slack-Request-Timestamp"] = "yesterday"
    return headers


def unsigned(_raw: str) -> dict[str, str]:
    return {}


GOOD_EVENT = json.dumps(event_body({"type": "message", "channel": "D1", "user": "U9", "text": "x"}))
BIG = json.dumps({"type": "event_callback", "padding": "x" * (2 * MAX_BODY)})
COMMAND = urlencode({"command": "/help", "text": "", "user_id": "U9", "channel_id": "D1"})

CASES = [
    # Slack Events API
    case("events unsigned", EVENTS, GOOD_EVENT, unsigned, 401),
    case("events bad signature", EVENTS, GOOD_EVENT, bad_signature, 401),
    case("events stale timestamp", EVENTS, GOOD_EVENT, stale_signature, 401),
    case("events non-numeric timestamp", EVENTS, GOOD_EVENT, non_numeric_timestamp, 401),
    case("events signed, not JSON", EVENTS, "{not json", signed, 400),
    case("events signed, not UTF-8", EVENTS, b'{"a": "\xff\xfe"}', signed, 400),
    case("events signed, nested 100 000 deep", EVENTS, nested(5_000), signed, 400),
    case("events signed, nested 100 deep", EVENTS, nested(100), signed, 400),
    case("events signed, a JSON list", EVENTS, "[1, 2, 3]", signed, 400),
    case("events signed, a JSON string", EVENTS, '"hello"', signed, 400),
    case("events signed, no type", EVENTS, '{"event": {"type": "message"}}', signed, 400),
    case(
        "events signed, event is a string",
        EVENTS,
        '{"type": "event_callback", "event_id": "Ev1", "event": "boom"}',
        signed,
        (200, 400),
    ),
    case("events over the size limit", EVENTS, BIG, signed, 413),
    # Slack slash commands
    case("commands unsigned", COMMANDS, COMMAND, unsigned, 401),
    case("commands bad signature", COMMANDS, COMMAND, bad_signature, 401),
    case("commands signed, garbage form", COMMANDS, "%%%&&&===", signed, 400),
    case("commands signed, no command", COMMANDS, "text=hi", signed, 400),
    case("commands over the size limit", COMMANDS, "text=" + "x" * (2 * MAX_BODY), signed, 413),
    # Slack interactivity (buttons, shortcuts, modals)
    case("interactivity unsigned", INTERACTIVITY, "payload=%7B%7D", unsigned, 401),
    case("interactivity signed, payload not JSON", INTERACTIVITY, "payload=%7Bno", signed, 400),
    case("interactivity signed, no payload", INTERACTIVITY, "foo=bar", signed, 400),
    case(
        "interactivity signed, unknown action",
        INTERACTIVITY,
        urlencode(
            {
                "payload": json.dumps(
                    {
                        "type": "block_actions",
                        "actions": [{"action_id": "nobody-listens", "block_id": "b"}],
                        "user": {"id": "U9"},
                        "team": {"id": "T1"},
                    }
                )
            }
        ),
        signed,
        200,
    ),
    # Telegram webhook
    case(
        "telegram no secret",
        TELEGRAM,
        json.dumps(private("hi")),
        lambda _: telegram_headers(None),
        403,
    ),
    case(
        "telegram wrong secret",
        TELEGRAM,
        json.dumps(private("hi")),
        lambda _: telegram_headers("nope"),
        403,
    ),
    case("telegram not JSON", TELEGRAM, "{nope", lambda _: telegram_headers(), 400),
    case("telegram nested deep", TELEGRAM, nested(5_000), lambda _: telegram_headers(), 400),
    case(
        "telegram update_id not a number",
        TELEGRAM,
        '{"update_id": "x"}',
        lambda _: telegram_headers(),
        400,
    ),
    case("telegram a JSON list", TELEGRAM, "[]", lambda _: telegram_headers(), 400),
    case("telegram over the size limit", TELEGRAM, BIG, lambda _: telegram_headers(), 413),
    case(
        "telegram message of the wrong shape",
        TELEGRAM,
        json.dumps({"update_id": 77, "message": {"chat": "oops", "text": 5}}),
        lambda _: telegram_headers(),
        (200, 400),
    ),
]


@pytest.fixture
@starts_the_service
async def service(tmp_path: Path) -> AsyncIterator[tuple[Service, FakeTelegram]]:
    db = Database("sqlite", tmp_path)
    async with FakeAnthropic(api_key=TEST_API_KEY) as model:
        model.responder = lambda body: text_reply(f"re: {last_user_text(body)}")
        async with FakeSlack() as slack, FakeTelegram() as telegram:
            port = free_port()
            env = service_env(
                db,
                model,
                slack,
                port,
                TELEGRAM_BOT_TOKEN=TOKEN,
                TELEGRAM_WEBHOOK_SECRET=WEBHOOK_SECRET,
                SWITCHBOARD__TELEGRAM__ENABLED="true",
                SWITCHBOARD__TELEGRAM__MODE="webhook",
                SWITCHBOARD__TELEGRAM__WEBHOOK_URL="https://bot.example.com/telegram/webhook",
                SWITCHBOARD__TELEGRAM__API_BASE_URL=telegram.base_url,
                SWITCHBOARD__SERVER__MAX_BODY_BYTES=str(MAX_BODY),
            )
            svc = Service(env, tmp_path, port)
            await svc.start()
            try:
                yield svc, telegram
            finally:
                await svc.stop()


async def test_every_endpoint_answers_bad_input_with_a_4xx(
    service: tuple[Service, FakeTelegram],
) -> None:
    svc, telegram = service
    got: dict[str, int] = {}
    async with aiohttp.ClientSession() as http:
        for c in CASES:
            headers = {"Content-Type": c.content_type, **c.headers(c.body.decode("latin-1"))}
            async with http.post(svc.url + c.path, data=c.body, headers=headers) as response:
                got[c.name] = response.status
                await response.read()
        async with http.get(svc.url + "/healthz") as response:
            assert response.status == 200

        # ... and it still does its job: a good Slack event and a good update.
        raw = json.dumps(
            event_body({"type": "message", "channel": "D7", "user": "U7", "text": "still here"})
        )
        async with http.post(svc.url + EVENTS, data=raw, headers=slack_json(raw)) as response:
            assert response.status == 200
        update = {"update_id": 9001, **private("and here")}
        async with http.post(
            svc.url + TELEGRAM, data=json.dumps(update), headers=telegram_headers()
        ) as response:
            assert response.status == 200

    wrong = {
        c.name: got[c.name]
        for c in CASES
        if got[c.name] not in (c.expected if isinstance(c.expected, tuple) else (c.expected,))
    }
    listing = "\n".join(f"{name}: {status}" for name, status in wrong.items())
    assert not wrong, f"unexpected statuses:\n{listing}\n{svc.log_text}"
    await wait_for(
        lambda: any(c.visible_text == "re: and here" for c in telegram.sent()),
        "the good Telegram update is answered",
        svc,
    )
    logs = svc.log_text
    rejections = [
        line
        for line in svc.logs
        if "WARNING" in line and ("rejected" in line or "webhook_forbidden" in line)
    ]
    assert len(rejections) == sum(1 for status in got.values() if status >= 400), logs
    assert "Traceback" not in logs and " ERROR " not in logs, logs
    for secret in (SIGNING_SECRET, BOT_TOKEN, TOKEN, WEBHOOK_SECRET):
        assert secret not in logs
    assert svc.proc is not None and svc.proc.returncode is None
