"""Budget reservations: no token is spent that the allowance did not allow, even
with many messages of one user at once, and one run cannot spend a month; a
limit set, or a role changed, while an unlimited run goes on counts from its
next LLM call."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import event
from sqlmodel import select

from bot.accounts.budgets import Budgets
from bot.accounts.directory import Directory
from bot.accounts.identity import Identity
from bot.store.coordination import ACCOUNT
from bot.store.models import Budget, BudgetHold, TokenLog
from bot.types import Role
from tests.conftest import Database
from tests.fakes.anthropic import FakeUsage, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.probes import ProbeTool

NOTICE_S = 30.0
"""How long a test waits for the account's notice to reach the app
(PostgreSQL). A notice is heard in milliseconds; under a parallel run of the
whole suite the 5 s this was once ran out (the tool's wait failed, the run
went on with its cached limit). Once heard, the cache is dropped, whatever
its TTL."""


async def spent(app: Any) -> tuple[int, int, list[int]]:
    """(tokens charged, tokens still held, each call's tokens as logged)."""
    async with app.store.read() as s:
        budget = (await s.exec(select(Budget))).one()
        held = sum(h.tokens for h in (await s.exec(select(BudgetHold))).all())
        calls = [t.input_tokens + t.output_tokens for t in (await s.exec(select(TokenLog))).all()]
    return budget.used + budget.overage, held, calls


async def stopped_at_the_fourth_call(
    app: Any, fake_anthropic: Any, user_id: int, heard: asyncio.Event
) -> None:
    """A tool loop of the user's (1,010 tokens a call), changed by the tool at
    its third step, is refused at its fourth call, having charged its three;
    `heard` is set at the account's notice (listened for as the running
    service does, PostgreSQL)."""
    coordination = app.pipeline.s.coordination
    await coordination.listen(
        lambda kind, key: heard.set() if (kind, key) == (ACCOUNT, str(user_id)) else None
    )
    await earlier_notices_heard(coordination)
    heard.clear()  # set by an earlier notice of the account (its role set by the test)
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.responder = lambda body: tool_use_reply(
        tool_call("step"), usage=FakeUsage(input_tokens=1000, output_tokens=10)
    )
    outcome = await app.pipeline.handle(message("loop"))

    assert outcome.status == "refused"
    assert "tokens this month" in adapter.sent[-1].text
    assert fake_anthropic.request_count == 3  # no call after the change
    charged, reserved, calls = await spent(app)
    assert charged == sum(calls) == 3 * 1010 and reserved == 0


async def earlier_notices_heard(coordination: Any) -> None:
    """(PostgreSQL) Return once every notice sent before has reached this
    instance: a listener hears notices in the order their transactions
    committed, so a marker sent now comes after them. An account's notice
    committed before the test's change (its creation, a role set) may
    otherwise be heard only after the listener is in place, and be taken for
    the change's own."""
    if not coordination.notifies:
        return
    marker = asyncio.Event()
    coordination.subscribe(lambda kind, key: marker.set() if kind == "test-marker" else None)
    await coordination.notify("test-marker", "")
    await asyncio.wait_for(marker.wait(), NOTICE_S)


async def set_role(
    app: Any, database: Database, where: str, user_id: int, role: Role, heard: asyncio.Event
) -> None:
    """Change the user's role `where`: "here" as the /role command does, or as
    `switchboard admin role set` does, in its own process (on PostgreSQL,
    returning once `heard`: the account's notice reached the app)."""
    if where == "here":
        await Directory(app.store, app.pipeline.s.identity).set_role(user_id, role)
        return
    other = database.store()
    try:
        await Directory(other, Identity(other, ())).set_role(user_id, role)
    finally:
        await other.dispose()
    if not app.store.is_sqlite:
        await asyncio.wait_for(heard.wait(), NOTICE_S)


@pytest.mark.slow  # fifty messages through the pipeline
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
    steps = itertools.count()  # each step new: loop detection does not stop it first
    fake_anthropic.responder = lambda body: tool_use_reply(
        tool_call("step", {"x": str(next(steps))}),
        usage=FakeUsage(input_tokens=3000, output_tokens=100),
    )
    outcome = await app.pipeline.handle(message("loop forever"))

    charged, _, calls = await spent(app)
    assert outcome.status == "refused"
    assert "one run may use" in adapter.sent[-1].text
    assert charged <= 20_000 and len(calls) < 50


@pytest.mark.parametrize("where", ["here", "another process"])
async def test_a_limit_set_while_an_unlimited_run_goes_on_stops_it_at_the_next_call(
    make_app, fake_anthropic, database: Database, where: str
):
    heard = asyncio.Event()

    async def limited_at_the_third_step(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        if len(tool.calls) == 3:  # an operator sets the allowance to what is spent
            used = (await spent(app))[0]
            if where == "here":
                await s.budgets.set_limit(user.id, "fixed", used)
            else:  # as `switchboard admin budget set` does, in its own process
                other = database.store()
                try:
                    await Budgets(other, app.settings.budgets).set_limit(user.id, "fixed", used)
                finally:
                    await other.dispose()
                if not s.store.is_sqlite:  # PostgreSQL: once the notice is heard,
                    await asyncio.wait_for(heard.wait(), NOTICE_S)
        return "stepped"

    step = ProbeTool("step", behaviour=limited_at_the_third_step)
    app = await make_app(tools=[step], budgets={"guest": "unlimited"}, llm={"max_iterations": 10})
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    await stopped_at_the_fourth_call(app, fake_anthropic, user.id, heard)


@pytest.mark.parametrize("where", ["here", "another process"])
async def test_a_role_changed_while_an_unlimited_run_goes_on_counts_from_the_next_call(
    make_app, fake_anthropic, database: Database, where: str
):
    """An unlimited user made a guest (a small allowance) while their tool loop
    goes on: the next call reserves from the guest's allowance, and is refused."""
    heard = asyncio.Event()

    async def demoted_at_the_third_step(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        if len(tool.calls) == 3:
            await set_role(app, database, where, user.id, Role.GUEST, heard)
        return "stepped"

    step = ProbeTool("step", behaviour=demoted_at_the_third_step)
    app = await make_app(
        tools=[step], budgets={"user": "unlimited", "guest": 100}, llm={"max_iterations": 10}
    )
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    await Directory(app.store, s.identity).set_role(user.id, Role.USER)
    await stopped_at_the_fourth_call(app, fake_anthropic, user.id, heard)


async def test_a_role_unchanged_costs_a_tool_loop_no_read_per_call(make_app, fake_anthropic):
    """Rechecking before each call reads nothing while the cached account and
    limit hold: a limited user's loop reads only what its reservations do."""
    step = ProbeTool("step")
    app = await make_app(tools=[step], budgets={"guest": 200_000}, llm={"max_iterations": 4})
    app.attach(RecordingAdapter())
    reads: list[str] = []
    event.listen(
        app.store.engine.sync_engine,
        "before_cursor_execute",
        lambda _c, _cur, sql, *_: (
            reads.append(sql) if "platform_links.platform_user_id =" in sql else None
        ),
    )
    fake_anthropic.responder = lambda body: tool_use_reply(tool_call("step"))
    await app.pipeline.handle(message("loop"))
    assert fake_anthropic.request_count == 4
    assert len(reads) == 1  # the look for the account as it came in (new), never again


async def test_a_budget_that_cannot_be_read_again_mid_run_leaves_it_as_it_began(
    make_app, fake_anthropic, monkeypatch, caplog
):
    """The database fails when a run that began unlimited asks again: the run
    goes on (it passed its check as it began), and the operator is told."""
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())

    async def unreadable(*_: Any) -> bool:
        raise OSError("disk I/O error")

    monkeypatch.setattr(app.pipeline.s.budgets, "unlimited_now", unreadable)
    fake_anthropic.script(tool_use_reply(tool_call("current_time")), text_reply("done"))
    with caplog.at_level(logging.WARNING, logger="switchboard.budget"):
        outcome = await app.pipeline.handle(message("what time is it"))
    assert outcome.status == "answered"
    assert fake_anthropic.request_count == 2
    assert "budget.recheck_failed" in caplog.text and "disk I/O error" in caplog.text


@pytest.mark.parametrize("where", ["here", "another process"])
async def test_a_user_demoted_while_a_run_goes_on_loses_the_tools_of_their_old_role(
    make_app, fake_anthropic, database: Database, where: str
):
    """An admin made a plain user while their run calls an admin-only tool:
    from the next LLM call the run no longer runs that tool (the model is told
    it is not available), and the tools it still runs see the new role."""
    heard = asyncio.Event()
    seen_roles: list[Role] = []

    async def demoted_at_the_second_call(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        if len(tool.calls) == 2:
            await set_role(app, database, where, user.id, Role.USER, heard)
        return "done as admin"

    admin_only = ProbeTool("admin_step", behaviour=demoted_at_the_second_call)
    admin_only.min_role = Role.ADMIN

    async def who(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        seen_roles.append(tool.contexts[-1].role)
        return "checked"

    anyone = ProbeTool("whoami", behaviour=who)
    app = await make_app(
        tools=[admin_only, anyone],
        budgets={"admin": "unlimited", "user": "unlimited"},
        llm={"max_iterations": 10},
    )
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    await Directory(app.store, s.identity).set_role(user.id, Role.ADMIN)
    await app.pipeline.s.coordination.listen(
        lambda kind, key: heard.set() if (kind, key) == (ACCOUNT, str(user.id)) else None
    )
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        *(tool_use_reply(tool_call("admin_step"), tool_call("whoami")) for _ in range(3)),
        text_reply("finished"),
    )
    outcome = await app.pipeline.handle(message("loop"))

    assert outcome.status == "answered"
    assert len(admin_only.calls) == 2  # not run at the third step, after the demotion
    assert seen_roles == [Role.ADMIN, Role.ADMIN, Role.USER]
    last = fake_anthropic.requests[-1].body["messages"][-1]["content"]
    refused = [b for b in last if b["type"] == "tool_result" and b.get("is_error")]
    assert len(refused) == 1 and "not available" in str(refused[0]["content"])


async def test_a_run_left_no_tool_it_may_run_asks_for_an_answer_without_tools(
    make_app, fake_anthropic, tmp_path
):
    """A persona whose only tool is admin-only, its admin demoted mid-run: the
    next request still defines the tool (its calls are in the history) and
    says tool_choice none, so the model answers instead of calling it."""
    heard = asyncio.Event()
    personas = tmp_path / "personas"
    personas.mkdir()
    (personas / "default.toml").write_text(
        'name = "default"\nis_default = true\nprompt = "You help."\ntools = ["test"]\n'
    )

    async def demoting(tool: ProbeTool, args: Mapping[str, Any]) -> str:
        await Directory(app.store, app.pipeline.s.identity).set_role(user.id, Role.USER)
        heard.set()
        return "done as admin"

    admin_only = ProbeTool("admin_step", behaviour=demoting)
    admin_only.min_role = Role.ADMIN
    app = await make_app(
        tools=[admin_only],
        budgets={"admin": "unlimited", "user": "unlimited"},
        personas={"dir": str(personas)},
    )
    user = await app.pipeline.s.identity.resolve(message("hi"))
    await Directory(app.store, app.pipeline.s.identity).set_role(user.id, Role.ADMIN)
    app.attach(RecordingAdapter())
    fake_anthropic.script(
        tool_use_reply(tool_call("admin_step")),
        tool_use_reply(tool_call("admin_step")),  # a model that calls it all the same
        text_reply("answered"),
    )
    outcome = await app.pipeline.handle(message("go"))

    assert outcome.status == "answered" and heard.is_set()
    first, second, third = (r.body for r in fake_anthropic.requests[-3:])
    assert [t["name"] for t in first["tools"]] == ["admin_step"]
    assert "tool_choice" not in first
    assert [t["name"] for t in second["tools"]] == ["admin_step"]
    assert second["tool_choice"] == {"type": "none"}
    assert third["tool_choice"] == {"type": "none"}  # and every call after it
    assert len(admin_only.calls) == 1
