"""A run killed mid-call with a limited budget: its hold dies with it.

`switchboard run` as a subprocess (Slack over HTTP, the fake model), a guest
with a 5,000-token allowance whose first call holds all of it (the call's
`max_tokens` is capped to the allowance). The service is SIGKILLed while the
fake model holds that call, and restarted: as soon as recovery took the dead
run over (its lease: seconds), the hold is gone, the user's next message is
answered, not refused, the message that was killed is answered too, and what
the user was charged is what the token logs say was spent. On SQLite and on
PostgreSQL. (The counter this replaced kept the dead call's reservation for
twelve minutes, and every later reservation pushed that further.)"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlmodel import select

from bot.store.models import Budget, BudgetHold, Run, TokenLog
from tests.conftest import TEST_API_KEY, Database
from tests.fakes.anthropic import FakeAnthropic, MessageReply, last_user_text, text_reply
from tests.fakes.slack import FakeSlack
from tests.pipeline.test_crash_recovery import dm_event, replies_in, wait_for
from tests.service_rig import Service, SlackSender, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

LIMITED = {
    "SWITCHBOARD__BUDGETS__GUEST": "5000",
    "SWITCHBOARD__LLM__MAX_TOKENS": "8192",  # a call may write more than the allowance
    "SWITCHBOARD__STREAMING__SLACK__ENABLED": "false",
}


async def holds_and_spending(database: Database) -> tuple[list[BudgetHold], int, int, list[str]]:
    """(the holds, tokens charged, tokens the token logs count, run statuses)."""
    store = database.store()
    try:
        async with store.read() as s:
            held = list((await s.exec(select(BudgetHold))).all())
            budgets = (await s.exec(select(Budget))).all()
            logs = (await s.exec(select(TokenLog))).all()
            runs = (await s.exec(select(Run))).all()
    finally:
        await store.dispose()
    charged = sum(b.used + b.overage for b in budgets)
    logged = sum(t.input_tokens + t.output_tokens for t in logs)
    return held, charged, logged, [r.status for r in runs]


async def test_a_run_killed_mid_call_leaves_no_hold_once_recovery_ran(
    database: Database, tmp_path: Path
) -> None:
    first_call = threading.Event()
    async with FakeAnthropic(api_key=TEST_API_KEY) as model, FakeSlack() as slack:

        def answer(body: dict[str, Any]) -> MessageReply:
            said = last_user_text(body)
            held = first_call if model.request_count == 1 else None  # the call killed
            return text_reply(f"re: {said}", hold=held)

        model.responder = answer
        env = service_env(database, model, slack, port := free_port(), **LIMITED)
        service = Service(env, tmp_path, port)
        await service.start()
        async with aiohttp.ClientSession() as http:
            sender = SlackSender(http, [service.url])
            await sender.deliver(dm_event("D1", "U1", "first", "1700000001.000001"))
            await wait_for(lambda: model.request_count == 1, "the first call", service)
            held, *_ = await holds_and_spending(database)
            assert [h.tokens for h in held] == [5000]  # all of the allowance, capped
            service.kill()  # mid-call: the hold is left behind
            await service.stop()
            first_call.set()  # the request in flight dies with its client
            await service.start()
            await wait_for(
                lambda: any("budget.holds_released" in line for line in service.logs),
                "recovery taking the dead run over",
                service,
            )
            await sender.deliver(dm_event("D2", "U1", "second", "1700000002.000001"))
            await wait_for(lambda: replies_in(slack, "D2") != [], "the next message", service)
            await wait_for(lambda: replies_in(slack, "D1") != [], "the killed message", service)
        code = await service.stop()

    assert code == 0, service.log_text
    assert replies_in(slack, "D2") == ["re: second"], service.log_text
    assert replies_in(slack, "D1") == ["re: first"], service.log_text
    held, charged, logged, statuses = await holds_and_spending(database)
    assert held == []
    assert charged == logged > 0  # the killed call spent nothing it was charged for
    assert "refused" not in statuses  # (the next message may wait for the first's new call)
