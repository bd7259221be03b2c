"""A conversation's next message never overtakes an earlier one that a dead
process left unfinished (the soak found replies out of order after every
kill and SIGTERM: the new message took the free conversation lease and ran
while the earlier one waited for recovery).

The earlier message is accepted by an "instance" that then dies mid-run: its
inbox row is running, leased to it. The next message waits (in the inbox);
the recovery sweep leaves it while the earlier lease lasts, then takes both
and answers them in order: they queue together (the second joins the
first's run), before a message arriving meanwhile. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col, select

from bot.pipeline.arrivals import Arrivals
from bot.pipeline.control import Batch, RunControl, Ticket
from bot.pipeline.intake import Inbox
from bot.pipeline.outbox import Outbox
from bot.store.models import InboxItem, OutboxItem
from bot.types import Outcome, Reply, Target, utcnow
from tests.fakes.anthropic import last_user_text, text_reply
from tests.harness import RecordingAdapter, message
from tests.waiting import wait_until


def answer_the_last_line(body):  # type: ignore[no-untyped-def]
    """The fake model's answer: "re: " and the last line of what it was asked."""
    return text_reply("re: " + last_user_text(body).splitlines()[-1])


async def console_app(make_app):  # type: ignore[no-untyped-def]
    """An app with unlimited guests and a recording console adapter attached:
    (the app, the adapter, its store)."""
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter, app.pipeline.s.store


async def test_the_next_message_waits_for_an_earlier_one_a_dead_instance_held(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.responder = answer_the_last_line
    app, adapter, store = await console_app(make_app)
    dead = Inbox(store, "instance-that-died", 60)
    assert await dead.accept(message("first", event_id="e1"))  # mid-run when it died

    # (as a delivery's own task: the message is no longer in hand once it ended)
    handled = asyncio.create_task(app.pipeline.handle(message("second", event_id="e2")))
    outcome = await handled
    await asyncio.sleep(0)  # its done callbacks
    assert outcome.status == "queued"  # left in the inbox, behind the first
    assert fake_anthropic.request_count == 0

    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    swept = await housekeeper.sweep()  # the first's lease still runs: nothing to take
    await housekeeper.wait_idle()
    assert swept.messages == 0 and fake_anthropic.request_count == 0

    async with store.write() as session:  # its lease ends
        await session.exec(
            update(InboxItem)
            .where(col(InboxItem.event_id) == "e1")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    swept = await housekeeper.sweep()
    await housekeeper.wait_idle()
    assert swept.messages == 2
    # In order: the second queued behind the first and joined its run.
    assert adapter.texts == ["re: second"]
    asked = last_user_text(fake_anthropic.requests[-1].body)
    assert asked.index("first") < asked.index("second")


async def test_messages_taken_over_together_queue_before_one_arriving_meanwhile(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """The soak's last disorder: after a kill, the recovery sweep took the dead
    run's message and the one waiting behind it, and resumed the second only
    once the first was answered; a message arriving meanwhile joined the
    first's run, so it was answered before the second (sent earlier)."""
    first_held = threading.Event()

    def respond(body):  # type: ignore[no-untyped-def]
        said = last_user_text(body).splitlines()[-1]
        return text_reply(f"re: {said}", hold=first_held if said == "first" else None)

    fake_anthropic.responder = respond
    app, adapter, store = await console_app(make_app)
    dead = Inbox(store, "instance-that-died", 60)
    assert await dead.accept(message("first", event_id="e1"))  # mid-run when it died
    handled = asyncio.create_task(app.pipeline.handle(message("second", event_id="e2")))
    assert (await handled).status == "queued"  # behind the first, in the inbox
    await asyncio.sleep(0)
    async with store.write() as session:  # the dead instance's lease ends
        await session.exec(
            update(InboxItem)
            .where(col(InboxItem.event_id) == "e1")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    assert (await housekeeper.sweep()).messages == 2
    await fake_anthropic.wait_for_requests(1)  # the first's run calls the model (held)

    third = message("third", event_id="e3")
    control = app.pipeline.s.control
    arriving = asyncio.create_task(app.pipeline.handle(third))
    await wait_until(  # it waits for the run going on (which takes it in)
        lambda: any(
            t.payload.origin.text == "third" for t in control._lanes[third.conversation_key].pending
        )
    )
    first_held.set()
    await arriving
    await housekeeper.wait_idle()
    # The third is answered last: with the second in the run, or after it.
    assert adapter.texts[-1] == "re: third", adapter.texts


async def test_an_earlier_message_queued_late_runs_before_newer_ones_waiting() -> None:
    """A message taken over from a dead process reaches the run control after
    newer ones of its conversation already wait there: it takes its place by
    when it was received, and drives the next run before them."""
    control = RunControl()
    release = asyncio.Event()
    runs: list[list[str]] = []

    async def drive(batch: Batch) -> Outcome:
        runs.append([t.payload for t in batch.tickets])
        if batch.tickets[0].payload == "running":
            await release.wait()
        return Outcome("answered")

    def submit(name: str, order: float) -> asyncio.Task[Outcome]:
        ticket = Ticket(name, group=name, order=order)  # each its own sender
        return asyncio.create_task(control.submit("k", "c", ticket, drive))

    running = submit("running", 1.0)
    await wait_until(lambda: control.active("k") is not None)
    newer = submit("newer", 3.0)
    await wait_until(lambda: control.queued("k") == 1)
    older = submit("older", 2.0)  # taken over: received before "newer"
    await wait_until(lambda: control.queued("k") == 2)
    release.set()
    await asyncio.gather(running, newer, older)
    assert runs == [["running"], ["older"], ["newer"]]


async def test_an_earlier_message_takes_its_place_ahead_in_the_line() -> None:
    arrivals = Arrivals()
    newer = arrivals.arrive("k", 3.0)
    older = arrivals.arrive("k", 2.0)  # taken over while the newer one is on its way
    waiting = asyncio.create_task(arrivals.turn(newer))
    await arrivals.turn(older)  # nothing ahead of it
    assert not waiting.done()
    arrivals.leave(older)
    await waiting
    arrivals.leave(newer)


async def test_a_deferred_message_is_no_longer_in_hand(make_app, fake_anthropic) -> None:  # type: ignore[no-untyped-def]
    """A deferred message goes back to the inbox; the sweep that takes it
    runs it, even while the task that deferred it has not ended yet (the soak
    found one skipped as "still in hand": leased to its instance, renewed,
    never answered, and later messages ran before it)."""
    fake_anthropic.responder = answer_the_last_line
    app, adapter, store = await console_app(make_app)
    dead = Inbox(store, "instance-that-died", 60)
    assert await dead.accept(message("first", event_id="e1"))
    # in this very task, which goes on after the message was deferred
    assert (await app.pipeline.handle(message("second", event_id="e2"))).status == "queued"
    assert not app.pipeline.working_on("console", "e2")
    async with store.write() as session:  # the dead instance's lease ends
        await session.exec(
            update(InboxItem)
            .where(col(InboxItem.event_id) == "e1")
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    assert (await housekeeper.sweep()).messages == 2
    await housekeeper.wait_idle()
    assert adapter.texts == ["re: second"]


async def test_a_message_that_took_no_lease_at_intake_waits_for_an_earlier_one_too(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """Whether an earlier message is unfinished elsewhere is asked with the
    conversation's lease: by intake's transaction, or, for a message whose
    sender was not known here lately (no lease taken at intake), by the
    transaction that takes the lease before its run; that one waits too."""
    fake_anthropic.responder = lambda body: text_reply("re: " + last_user_text(body))
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    assert (await app.pipeline.handle(message("hello", event_id="e0"))).status == "answered"
    app.pipeline.s.identity.forget()  # not seen lately: no lease at intake
    dead = Inbox(app.pipeline.s.store, "instance-that-died", 60)
    assert await dead.accept(message("first", event_id="e1"))
    assert (await app.pipeline.handle(message("second", event_id="e2"))).status == "queued"
    assert fake_anthropic.request_count == 1


async def test_the_next_message_waits_for_a_reply_a_dead_instance_left_unsent(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """The soak (seed 7, PostgreSQL): an instance stopped between a turn and
    its delivery; the conversation's next message ran on the other instance
    and its streamed answer was posted before the recovered reply to the
    earlier one. The next message now waits in the inbox while a reply of
    its conversation is unsent; recovery sends that reply, then runs it."""
    fake_anthropic.responder = answer_the_last_line
    app, adapter, store = await console_app(make_app)
    dead = Outbox(store, "instance-that-died", 60)
    await dead.store([Reply("re: first", Target(platform="console", channel_id="room"))])

    handled = asyncio.create_task(app.pipeline.handle(message("second", event_id="e2")))
    assert (await handled).status == "queued"
    await asyncio.sleep(0)  # its done callbacks
    assert fake_anthropic.request_count == 0

    async with store.write() as session:  # the dead sender's lease ends
        await session.exec(
            update(OutboxItem).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    for _ in range(5):  # the reply is sent; the message runs once it is
        await housekeeper.sweep()
        await housekeeper.wait_idle()
        if len(adapter.texts) == 2:
            break
    assert adapter.texts == ["re: first", "re: second"]


async def test_a_new_senders_message_waits_for_an_earlier_one_handed_back_at_shutdown(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    """The soak (seed 7, PostgreSQL): a thread's message was handed back to
    the inbox by an instance stopping (SIGTERM); a later message of another
    person in the thread, a new user, took the conversation's lease and that
    waiting message with it at intake, and ran first: the earlier message,
    another sender's, was left to run after it. Now the later one waits; the
    sweep runs both, in order."""
    fake_anthropic.responder = answer_the_last_line
    app, adapter, store = await console_app(make_app)
    stopping = Inbox(store, "instance-that-stopped", 60)
    assert await stopping.accept(message("first", event_id="e1", platform_user_id="bob"))
    async with store.write() as session:  # handed back as it stopped
        await session.exec(
            update(InboxItem).values(state="pending", lease_owner=None, lease_expires_at=utcnow())
        )

    handled = asyncio.create_task(
        app.pipeline.handle(message("second", event_id="e2", platform_user_id="carol"))
    )
    assert (await handled).status == "queued"
    await asyncio.sleep(0)  # its done callbacks
    assert fake_anthropic.request_count == 0

    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    for _ in range(5):
        await housekeeper.sweep()
        await housekeeper.wait_idle()
        if len(adapter.texts) == 2:
            break
    assert adapter.texts == ["re: first", "re: second"]


async def test_a_recovered_reply_that_fails_is_logged_with_the_run_that_wrote_it(
    make_app, fake_anthropic, caplog
) -> None:  # type: ignore[no-untyped-def]
    """The soak (10 min, PostgreSQL): recovery sent a dead instance's reply
    outside any run; its delivery failed and the ERROR line had no run id, so
    nothing tied it to the outbox row's recorded failure. It now carries the
    run id the row records."""
    app, adapter, store = await console_app(make_app)
    adapter.fail_sends = True
    dead = Outbox(store, "instance-that-died", 60)
    async with store.write() as session:
        await dead.add(
            session,
            [Reply("re: first", Target(platform="console", channel_id="room"))],
            run_id="run-of-the-dead",
        )
        await session.exec(
            update(OutboxItem).values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    housekeeper = app.housekeeper
    housekeeper.platforms = ["console"]
    with caplog.at_level("ERROR", logger="switchboard.pipeline"):
        assert (await housekeeper.sweep()).replies == 1
        await housekeeper.wait_idle()
    failed = [r for r in caplog.records if r.getMessage().startswith("delivery.failed")]
    assert [getattr(r, "run_id", None) for r in failed] == ["run-of-the-dead"]
    async with store.read() as session:
        row = (await session.exec(select(OutboxItem))).one()
    assert (row.state, row.run_id) == ("failed", "run-of-the-dead")
