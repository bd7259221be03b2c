"""Budget holds (`bot.accounts.holds`): one row per LLM call in flight, the
rule that decides a call (refused only when settled usage and its estimate
pass the allowance; capped to what is left; waiting while only the user's
other calls hold what is missing), concurrent reservations that never
over-commit, a backstop no other call extends, the release of a dead run's
holds, and a refusal recorded on its run. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import col, select

from bot.accounts import holds
from bot.accounts.budgets import Budgets
from bot.accounts.holds import MIN_OUTPUT_TOKENS, Figures, HoldOwner, refusal_text
from bot.accounts.identity import Identity, current_period
from bot.config import BudgetSettings
from bot.conversations import Conversations
from bot.scheduling.jobs import Jobs
from bot.scheduling.parse import parse_when
from bot.store import Store
from bot.store.models import (
    Budget,
    BudgetHold,
    InboxItem,
    Message,
    OutboxItem,
    Run,
    ScheduledJob,
    TokenLog,
)
from bot.types import Role, utcnow
from tests.conftest import Database
from tests.fakes.anthropic import FakeUsage, text_reply, tool_call, tool_use_reply
from tests.harness import RecordingAdapter, message
from tests.pipeline.test_pipeline_metrics import scraped
from tests.probes import ProbeTool
from tests.waiting import wait_until
from tests.web.scrape import value

FIGURES = re.compile(r"used=(\d+) held=(\d+) estimate=(\d+) allowance=(\d+)")


async def make_user(store: Store, name: str = "alice"):  # type: ignore[no-untyped-def]
    return await Identity(store, ()).resolve_account("console", name)


async def spend(store: Store, budgets: Budgets, user_id: int, tokens: int) -> None:
    async with store.write() as session:
        await budgets.charge(session, user_id, Role.GUEST, tokens)


async def live_holds(store: Store) -> list[BudgetHold]:
    async with store.read() as session:
        return list((await session.exec(select(BudgetHold))).all())


# -- the rule ------------------------------------------------------------------


def test_the_estimate_counts_a_useful_answer_not_max_tokens() -> None:
    assert holds.estimate(1000, 4096) == 1000 + MIN_OUTPUT_TOKENS
    assert holds.estimate(1000, 100) == 1100  # a call that may write less needs less
    # 3,700 used of 5,000: input 1,000 + max_tokens 4,096 would not fit, the estimate does
    assert not holds.refused(3700, 5000, 1000, 4096)
    assert holds.decide(3700, 0, 5000, 1000, 4096) == 300  # capped to what is left
    assert holds.decide(3700, 100, 5000, 1000, 4096) is None  # held by another call: wait
    assert holds.refused(3800, 5000, 1000, 4096)  # 3,800 + 1,256 passes 5,000


def test_the_refusal_says_what_was_used_the_allowance_and_when_it_resets() -> None:
    text = refusal_text(Figures(4870, 0, 400, 5000, "2026-12"))
    assert text.startswith("You've used 4,870 of your 5,000 tokens this month")
    assert "the allowance resets on 1 January" in text
    spent = refusal_text(Figures(5000, 0, 256, 5000, "2026-03"))
    assert "not enough" not in spent and "resets on 1 April" in spent


async def test_a_hold_is_capped_to_what_is_left_and_a_refusal_has_its_figures(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=5000))
    user = await make_user(store)
    await spend(store, budgets, user.id, 3700)
    owner = HoldOwner("run-1", "console:room")

    fits = await budgets.reserve(user.id, Role.GUEST, owner, 1000, 4096)
    assert fits.hold is not None and (fits.max_tokens, fits.hold.tokens) == (300, 1300)
    await budgets.settle(fits.hold, 1300)
    refused = await budgets.reserve(user.id, Role.GUEST, owner, 1000, 4096)
    assert (refused.hold, refused.waits) == (None, False)
    assert refused.figures == Figures(5000, 0, 1256, 5000, current_period())


async def test_only_other_calls_in_the_way_means_waiting_not_refusal(store: Store):
    budgets = Budgets(store, BudgetSettings(guest=5000))
    user = await make_user(store)
    first = await budgets.reserve(user.id, Role.GUEST, HoldOwner("a", "k1"), 1000, 4000)
    assert first.hold is not None and first.hold.tokens == 5000  # all of it, capped
    second = await budgets.reserve(user.id, Role.GUEST, HoldOwner("b", "k2"), 500, 4096)
    assert (second.hold, second.waits) == (None, True)
    assert second.figures is not None and second.figures.held == 5000
    async with store.read() as session:
        row = await session.get(Budget, user.id)
        assert row is not None and row.awaited_until is not None  # settlements tell
    await budgets.settle(first.hold, 1200)
    third = await budgets.reserve(user.id, Role.GUEST, HoldOwner("b", "k2"), 500, 4096)
    assert third.hold is not None and third.max_tokens == 5000 - 1200 - 500


async def test_concurrent_reservations_for_one_user_never_over_commit(database: Database):
    """Thirty calls of one user reserve at once through three stores (three
    instances on PostgreSQL: three pools, transactions really concurrent):
    what is held never passes the allowance, and whatever did not fit waits
    (nothing is settled yet, so none is refused)."""
    stores = [database.store() for _ in range(3)]
    await stores[0].upgrade()
    allowance = 20_000
    try:
        user = await make_user(stores[0])
        each = [Budgets(store, BudgetSettings(guest=allowance)) for store in stores]
        decisions = await asyncio.gather(
            *(
                each[i % 3].reserve(user.id, Role.GUEST, HoldOwner(f"r{i}", f"k{i}"), 1500, 2000)
                for i in range(30)
            )
        )
        held = [d.hold for d in decisions if d.hold is not None]
        assert 2 <= len(held) < 30  # some fit, and the rest had to wait
        assert all(d.waits for d in decisions if d.hold is None)
        rows = await live_holds(stores[0])
        assert sum(row.tokens for row in rows) == sum(h.tokens for h in held) <= allowance
        # settled with all they held: used reaches the allowance, never passes it
        await asyncio.gather(*(each[0].settle(hold, hold.tokens) for hold in held))
        status = await each[0].status(user.id, Role.GUEST)
        assert (status.used, status.overage) == (sum(h.tokens for h in held), 0)
        assert status.used <= allowance and await live_holds(stores[0]) == []
    finally:
        for store in stores:
            await store.dispose()


async def test_the_backstop_is_never_extended_by_other_calls(store: Store):
    """A hold whose backstop passed counts for nothing, and another call's
    reservation does not bring it back (the counter this replaced pushed
    every reservation's deadline forward: a talking user kept a dead one alive)."""
    user = await make_user(store)
    dying = Budgets(store, BudgetSettings(guest=5000), hold_seconds=0.0)
    dead = await dying.reserve(user.id, Role.GUEST, HoldOwner("dead", "k1"), 1000, 4000)
    assert dead.hold is not None and dead.hold.tokens == 5000
    [row] = await live_holds(store)
    budgets = Budgets(store, BudgetSettings(guest=5000))
    for n in range(3):  # the user keeps talking
        later = await budgets.reserve(user.id, Role.GUEST, HoldOwner(f"r{n}", "k2"), 500, 500)
        assert later.hold is not None and later.figures is not None
        await budgets.settle(later.hold, 10)
    again = {h.id: h for h in await live_holds(store)}
    assert again[row.id].expires_at == row.expires_at  # not pushed forward


async def test_a_takeover_releases_the_dead_runs_holds_only(store: Store):
    user = await make_user(store)
    here = Budgets(store, BudgetSettings(guest=100_000), instance="here")
    dead = Budgets(store, BudgetSettings(guest=100_000), instance="dead")
    for budgets, key in ((dead, "k1"), (dead, "k2"), (here, "k1")):
        decided = await budgets.reserve(user.id, Role.GUEST, HoldOwner("r", key), 100, 100)
        assert decided.hold is not None
    async with store.write() as session:  # as the takeover of the dead instance's k1 does
        released = await here.release_dead(session, [("dead", "k1"), ("here", "k2")])
    assert released == {user.id}
    left = sorted((h.instance, h.conversation_key) for h in await live_holds(store))
    assert left == [("dead", "k2"), ("here", "k1")]


# -- through the pipeline ----------------------------------------------------------


async def test_a_message_waits_for_the_users_own_call_in_flight_then_is_answered(
    make_app, fake_anthropic, caplog: pytest.LogCaptureFixture
):
    """The user's first call holds all of a 6,000-token allowance (capped to
    it); their message in another conversation is not refused (nothing is
    spent yet) but waits for that call, and is answered once it settled."""
    app = await make_app(budgets={"guest": 6000}, llm={"max_tokens": 5500})
    adapter = RecordingAdapter()
    app.attach(adapter)
    released = threading.Event()
    fake_anthropic.script(
        text_reply("first", usage=FakeUsage(input_tokens=900, output_tokens=100), hold=released),
        text_reply("second", usage=FakeUsage(input_tokens=900, output_tokens=100)),
    )
    with caplog.at_level(logging.INFO, logger="switchboard.budget"):
        first = asyncio.create_task(app.pipeline.handle(message("one", platform_channel_id="a")))
        await fake_anthropic.wait_for_requests(1)
        second = asyncio.create_task(app.pipeline.handle(message("two", platform_channel_id="b")))
        await wait_until(lambda: "budget.waiting" in caplog.text)
        assert fake_anthropic.request_count == 1  # the second call waits, not sent
        released.set()
        outcomes = await asyncio.gather(first, second)
    assert [o.status for o in outcomes] == ["answered", "answered"]
    assert sorted(adapter.texts) == ["first", "second"]
    assert fake_anthropic.requests[1].body["max_tokens"] <= 6000 - 1000
    assert await live_holds(app.store) == []
    async with app.store.read() as s:
        budget = (await s.exec(select(Budget))).one()
    assert (budget.used, budget.overage) == (2000, 0)


async def test_a_wait_for_calls_that_never_settle_ends_in_a_refusal_within_the_run_timeout(
    make_app, fake_anthropic
):
    """Another run's hold that nobody settles (nor recovery releases): the
    message waits up to the run timeout (which stops meanwhile: the run is
    refused, not timed out), then is refused with what it was decided on."""
    app = await make_app(budgets={"guest": 5000}, agent={"run_timeout_seconds": 1.0})
    adapter = RecordingAdapter()
    app.attach(adapter)
    user = await app.pipeline.s.identity.resolve(message("hi"))
    stuck = await app.pipeline.s.budgets.reserve(
        user.id, Role.GUEST, HoldOwner("stuck", "elsewhere"), 1000, 4000
    )
    assert stuck.hold is not None
    outcome = await app.pipeline.handle(message("anyone there?"))
    assert outcome.status == "refused" and fake_anthropic.request_count == 0
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
    found = FIGURES.search(run.error or "")
    assert run.status == "refused" and found is not None
    used, held, _estimate, allowance = (int(n) for n in found.groups())
    assert (used, held, allowance) == (0, 5000, 5000)


async def test_a_refused_message_leaves_its_figures_on_the_run_and_is_answered_once(
    make_app, fake_anthropic
):
    app = await make_app(budgets={"guest": 5000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    s = app.pipeline.s
    user = await s.identity.resolve(message("hi"))
    await spend(app.store, s.budgets, user.id, 4900)
    outcome = await app.pipeline.handle(message("one more question"))

    assert outcome.status == "refused" and fake_anthropic.request_count == 0
    assert adapter.texts == [refusal_text(Figures(4900, 0, 256, 5000, current_period()))]
    assert adapter.texts[0].startswith("You've used 4,900 of your 5,000 tokens this month")
    async with app.store.read() as session:
        run = (await session.exec(select(Run))).one()
        item = (await session.exec(select(InboxItem))).one()
        outbox = (await session.exec(select(OutboxItem))).all()
        stored = (await session.exec(select(Message))).all()
    assert (run.status, run.user_id, run.tokens) == ("refused", user.id, 0)
    assert run.error is not None and "used=4900 held=0 estimate=256 allowance=5000" in run.error
    assert (item.state, item.run_id) == ("answered", run.id)
    assert [(o.run_id, o.state) for o in outbox] == [(run.id, "sent")]
    assert stored == []  # not part of the conversation: it was not answered
    assert value(await scraped(app), "switchboard_budget_refusals_total") == 1


async def test_a_call_refused_mid_run_is_recorded_with_the_figures_it_was_decided_on(
    make_app, fake_anthropic
):
    """A tool loop of 1,010 tokens a call, 6,000 of 10,000 spent before: the
    calls go on while their estimate fits (the last one capped), and the one
    whose estimate passes the allowance is refused; the run records the
    figures, and they show it (used + estimate > allowance)."""
    step = ProbeTool("step")
    app = await make_app(
        tools=[step], budgets={"guest": 10_000, "run_share": 1.0}, llm={"max_iterations": 20}
    )
    adapter = RecordingAdapter()
    app.attach(adapter)
    user = await app.pipeline.s.identity.resolve(message("hi"))
    await spend(app.store, app.pipeline.s.budgets, user.id, 6000)
    fake_anthropic.responder = lambda body: tool_use_reply(
        tool_call("step"), usage=FakeUsage(input_tokens=1000, output_tokens=10)
    )
    outcome = await app.pipeline.handle(message("loop"))
    assert outcome.status == "refused" and fake_anthropic.request_count >= 2
    async with app.store.read() as session:
        run = (await session.exec(select(Run))).one()
        logged = sum(
            t.input_tokens + t.output_tokens for t in (await session.exec(select(TokenLog))).all()
        )
        budget = (await session.exec(select(Budget))).one()
    found = FIGURES.search(run.error or "")
    assert run.status == "refused" and found is not None, run.error
    used, held, estimate, allowance = (int(n) for n in found.groups())
    assert (held, allowance) == (0, 10_000) and used + estimate > allowance
    assert budget.used + budget.overage == 6000 + logged and await live_holds(app.store) == []
    assert "tokens this month" in adapter.texts[-1]


async def test_a_wakeup_taken_over_releases_its_dead_runs_holds(store: Store):
    """A fire whose instance died mid-call (its lease ran out): the instance
    claiming it again releases the holds of that run (the job's
    conversation, on the dead instance) in the claim's transaction."""
    msg = message("-", platform="slack", platform_user_id="U1", platform_channel_id="D1")
    user = await Identity(store, ()).resolve(msg)
    conversation = await Conversations(store).resolve(msg)
    now = utcnow()
    job = await Jobs(store).create(
        owner_user_id=user.id,
        conversation_id=conversation.id,
        chat_type="direct",
        prompt="Say good morning.",
        spec=parse_when((now + timedelta(hours=1)).isoformat(), timezone="UTC", now=now),
        now=now,
    )
    async with store.write() as session:  # its fire ran on "dead", whose lease ran out
        await session.exec(
            update(ScheduledJob)
            .where(col(ScheduledJob.id) == job.id)
            .values(running_since=now, lease_owner="dead", lease_expires_at=now)
        )
    dead = Budgets(store, BudgetSettings(guest=5000), instance="dead")
    for key in (conversation.key, "slack:D2:-"):  # its run's hold, and another run's
        decided = await dead.reserve(user.id, Role.GUEST, HoldOwner("r", key), 500, 500)
        assert decided.hold is not None
    claim = await Jobs(store, "here").claim(job.id, utcnow(), timedelta(minutes=5))
    assert claim is not None and claim.takeover
    assert [h.conversation_key for h in await live_holds(store)] == ["slack:D2:-"]


async def test_a_settled_call_is_logged_with_its_charge_before_the_turn_is_written(
    make_app, fake_anthropic
):
    """A tool loop's first call is settled (charged) while the run goes on: its
    token log is written in that transaction, so a run that dies before its
    turn is written (SIGKILL) leaves no charge the token logs do not show;
    the turn then does not log the call again."""
    step = ProbeTool("step")
    app = await make_app(tools=[step], budgets={"guest": 50_000})
    adapter = RecordingAdapter()
    app.attach(adapter)
    second_call = threading.Event()
    fake_anthropic.script(
        tool_use_reply(tool_call("step"), usage=FakeUsage(input_tokens=1000, output_tokens=20)),
        text_reply("done", usage=FakeUsage(input_tokens=1100, output_tokens=5), hold=second_call),
    )
    running = asyncio.create_task(app.pipeline.handle(message("loop once")))
    await fake_anthropic.wait_for_requests(2)

    async def charged_and_logged() -> tuple[int, list[int]]:
        async with app.store.read() as s:
            budget = (await s.exec(select(Budget))).one()
            logs = (await s.exec(select(TokenLog))).all()
        return budget.used + budget.overage, [t.input_tokens + t.output_tokens for t in logs]

    # The second call is in flight: nothing of the turn is written yet.
    assert await charged_and_logged() == (1020, [1020])
    second_call.set()
    outcome = await running
    assert outcome.status == "answered"
    assert await charged_and_logged() == (2125, [1020, 1105])
