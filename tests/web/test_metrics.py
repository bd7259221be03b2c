"""`GET /metrics` of the real service (`switchboard run` as a subprocess, Slack
in HTTP mode against `FakeSlack`, the model at `FakeAnthropic`): signed Slack
messages — one answered, one NO_REPLY, one that calls a tool — move the
counters with the right labels; no label value (nor anything else in the
output) carries a user id, message text or a secret; every metric the example
Grafana dashboard queries is there; `[server] metrics = false` makes it 404."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.agent.sanitize import SILENT_TOKEN
from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import (
    FakeAnthropic,
    ScriptItem,
    last_user_text,
    text_reply,
    tool_use_reply,
)
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
from tests.paths import REPO_ROOT
from tests.pipeline.test_crash_recovery import dm_event
from tests.service_rig import Service, SlackSender, free_port, service_env
from tests.web.scrape import Samples, label_values, readyz, scrape_until, value

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

DASHBOARD = REPO_ROOT / "deploy" / "grafana-dashboard.json"
MODEL = "claude-sonnet-5-5"
USERS = ("UALICE0001", "UBOB000002", "UCAROL0003")
TEXTS = ("hello zebrafish", "stay quiet platypus", "what time is it axolotl")


def respond(body: dict[str, Any]) -> ScriptItem:
    last = body["messages"][-1]
    content = last.get("content")
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return text_reply("It is later than you think.")
    text = last_user_text(body)
    if "quiet" in text:
        return text_reply(SILENT_TOKEN)
    if "time" in text:
        return tool_use_reply(("current_time", {}))
    return text_reply("Hello to you too.")


def dashboard_metrics() -> set[str]:
    """The metric names the dashboard's queries use."""
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    assert exprs, "the dashboard has no queries"
    return {name for expr in exprs for name in re.findall(r"\bswitchboard_[a-z_]+", expr)}


def env_for(tmp_path: Path, model: FakeAnthropic, slack: FakeSlack, **extra: str) -> Service:
    port = free_port()
    env = service_env(Database("sqlite", tmp_path), model, slack, port, **extra)
    return Service(env, tmp_path, port)


async def test_a_conversation_moves_the_counters_and_no_label_leaks(tmp_path: Path) -> None:
    def settled(s: Samples) -> bool:
        return (
            value(s, "switchboard_run_duration_seconds_count", status="completed") == 2
            and value(s, "switchboard_replies_sent_total", platform="slack") == 2
            and value(s, "switchboard_replies_suppressed_total", platform="slack") == 1
            and value(s, "switchboard_inbox_pending") == 0
        )

    async with (
        FakeAnthropic(api_key=TEST_API_KEY, responder=respond) as model,
        FakeSlack() as slack,
    ):
        service = env_for(tmp_path, model, slack)
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                sender = SlackSender(http, [service.url])
                for k, (user, text) in enumerate(zip(USERS, TEXTS, strict=True), 1):
                    await sender.deliver(dm_event(f"D{k}", user, text, f"170000000{k}.000001"))
                text, s = await scrape_until(http, service, settled, "three runs finished")
        finally:
            await service.stop()

    assert value(s, "switchboard_messages_received_total", platform="slack") == 3
    assert value(s, "switchboard_run_duration_seconds_count", status="silent") == 1
    assert value(s, "switchboard_llm_requests_total", model=MODEL, outcome="ok") == 4
    assert model.request_count == 4
    for kind in ("input", "output"):
        assert value(s, "switchboard_llm_tokens_total", kind=kind) > 0
    assert ("switchboard_llm_tokens_total", frozenset({("kind", "cache_read")})) in s
    assert value(s, "switchboard_llm_cost_usd_total") > 0
    assert value(s, "switchboard_tool_calls_total", tool="current_time", outcome="ok") == 1
    assert value(s, "switchboard_delivery_failures_total", platform="slack") == 0
    assert value(s, "switchboard_budget_refusals_total") == 0
    assert value(s, "switchboard_inbox_oldest_pending_seconds") == 0

    # Label hygiene: no user id, message text or secret anywhere in the output.
    words = {word for t in TEXTS for word in t.split() if len(word) > 4}
    for secret in (*USERS, *words, BOT_TOKEN, SIGNING_SECRET, TEST_API_KEY):
        assert secret not in text, secret
    assert all(re.fullmatch(r"[A-Za-z0-9_.:+\-]{1,64}", v) for v in label_values(s))

    # Every metric the example Grafana dashboard queries exists.
    names = {name for name, _ in s}
    missing = {m for m in dashboard_metrics() if m not in names}
    assert not missing, f"the dashboard queries metrics /metrics lacks: {sorted(missing)}"


async def test_metrics_off_is_a_404_and_all_up_is_ready(tmp_path: Path) -> None:
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:
        service = env_for(tmp_path, model, slack, SWITCHBOARD__SERVER__METRICS="false")
        await service.start()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(service.url + "/metrics") as response:
                    assert response.status == 404
                status, body = await readyz(http, service)
                async with http.get(service.url + "/healthz") as response:
                    assert response.status == 200
        finally:
            await service.stop()
    assert status == 200, body
    assert body == {"ready": True, "database": "ok", "adapters": {"slack": "ok"}}
