"""Budget reservations: no token is spent that the allowance did not allow, even
with many messages of one user at once, and one run cannot spend a month."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlmodel import select

from bot.store.models import Budget, TokenLog
from tests.fakes.anthropic import FakeUsage, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool


async def spent(app: Any) -> tuple[int, int, list[int]]:
    async with app.store.read() as s:
        budget = (await s.exec(select(Budget))).one()
        calls = [t.input_tokens + t.output_tokens for t in (await s.exec(select(TokenLog))).all()]
    return budget.used + budget.overage, budget.reserved, calls


async def test_fifty_messages_at_once_never_spend_past_the_allowance(make_app, fake_anthropic):
    allowance = 12_000
    app = await make_app(budgets={"guest": allowance}, llm={"max_tokens": 1000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    # Calls take a while, so all fifty are in flight together (fifty conversations
    # of one guest: nothing merges them). The fake reports the tokens it read.
    fake_anthropic.responder = lambda body: text_reply("ok", delay=0.2)
    messages = [
        message(f"question {i}", platform_channel_id=f"room{i}", platform_message_id=f"m{i}")
        for i in range(50)
    ]
    outcomes = await asyncio.gather(*(app.pipeline.handle(m) for m in messages))

    charged, reserved, calls = await spent(app)
    statuses = [o.status for o in outcomes]
    assert charged <= allowance + max(calls)  # at most one call straddles the limit
    assert charged == sum(calls)  # and every call is charged
    assert reserved == 0  # every reservation settled
    assert statuses.count("answered") == len(calls) == fake_anthropic.request_count
    assert statuses.count("refused") == 50 - len(calls) > 0
    refusal = next(r for r in adapter.sent if r.kind == "refusal")
    assert "tokens" in refusal.text


async def test_a_call_gets_a_smaller_max_tokens_when_less_is_left(make_app, fake_anthropic):
    app = await make_app(budgets={"guest": 5000}, llm={"max_tokens": 4096})
    app.attach(RecordingAdapter())
    fake_anthropic.script(text_reply("short", usage=FakeUsage(input_tokens=1300, output_tokens=20)))
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    max_tokens = fake_anthropic.last_request.body["max_tokens"]
    assert 256 <= max_tokens < 4096  # input + 4096 would not fit 5000
    charged, reserved, _ = await spent(app)
    assert (charged, reserved) == (1320, 0)


async def test_one_looping_run_is_stopped_at_the_run_cap(make_app, fake_anthropic):
    step = ProbeTool("step")
    app = await make_app(
        tools=[step],
        budgets={"guest": 200_000, "run_share": 0.1},  # 20,000 tokens per run
        llm={"max_iterations": 50},
    )
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.responder = lambda body: tool_use_reply(
        tool_call("step"), usage=FakeUsage(input_tokens=3000, output_tokens=100)
    )
    outcome = await app.pipeline.handle(message("loop forever"))

    charged, _, calls = await spent(app)
    assert outcome.status == "refused"
    assert "one run may use" in adapter.sent[-1].text
    assert charged <= 20_000 and len(calls) < 50
