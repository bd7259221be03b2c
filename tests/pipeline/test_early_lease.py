"""The conversation's lease taken with the message, at intake, or for a new
user's first message with their account (`bot.pipeline.early_lease`): the run
takes it over; a message that ends without a run hands it back; what other
instances left for the conversation runs with it; a lease held elsewhere is
left alone. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlmodel import func, select

from bot.pipeline.intake import CONVERSATION_LEASE, Inbox
from bot.store.leases import Leases
from bot.store.models import InboxItem, Lease, User
from bot.types import Attachment
from tests.fakes.anthropic import last_user_text, text_reply
from tests.harness import RecordingAdapter, message
from tests.pipeline.test_hot_path import statements


async def open_app(make_app):  # type: ignore[no-untyped-def]
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    return app


def refuse_claims(sqlite: bool) -> list[str]:
    """A trigger that fails any claim of a waiting inbox message while the
    table `refuse_claims` has a row."""
    table = [
        "CREATE TABLE refuse_claims (id INTEGER PRIMARY KEY)",
        "INSERT INTO refuse_claims VALUES (1)",
    ]
    if sqlite:
        return [
            *table,
            "CREATE TRIGGER refuse_claim BEFORE UPDATE OF state ON inbox"
            " WHEN OLD.state = 'pending' AND NEW.state = 'running'"
            " AND EXISTS (SELECT 1 FROM refuse_claims)"
            " BEGIN SELECT RAISE(ABORT, 'claim refused'); END",
        ]
    return [
        *table,
        "CREATE FUNCTION refuse_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF OLD.state = 'pending' AND NEW.state = 'running'"
        " AND EXISTS (SELECT 1 FROM refuse_claims)"
        " THEN RAISE EXCEPTION 'claim refused'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER refuse_claim BEFORE UPDATE ON inbox"
        " FOR EACH ROW EXECUTE FUNCTION refuse_claim()",
    ]


async def leave_waiting(app) -> None:  # type: ignore[no-untyped-def]
    """Another instance accepted a message for the conversation ("left for
    you", b-1) and left it waiting (its run found the conversation busy)."""
    other = Inbox(app.store, "instance-b", 30)
    left = dataclasses.replace(message("left for you"), event_id="b-1")
    assert await other.accept(left)
    assert await other.requeue(left.platform, ["b-1"]) == 1


async def install(app, statements: list[str]) -> None:  # type: ignore[no-untyped-def]
    async with app.store.write() as s:
        for statement in statements:
            await s.exec(text(statement))  # type: ignore[call-overload]


async def leases_held(app) -> list[Lease]:  # type: ignore[no-untyped-def]
    async with app.store.read() as s:
        return list((await s.exec(select(Lease))).all())


async def test_a_message_refused_before_its_run_hands_the_lease_back(make_app, fake_anthropic):
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"  # a known user now
    too_big = Attachment(
        "document", "f1", "video.mp4", "video/mp4", 50_000_000, problem="too large"
    )
    refused = await app.pipeline.handle(message("", attachments=(too_big,)))
    assert refused.status == "refused"
    assert await leases_held(app) == []  # handed back: the conversation is free
    assert (await app.pipeline.handle(message("again"))).status == "answered"
    assert await leases_held(app) == []


@pytest.mark.parametrize("sender", ["returning", "new"])
async def test_a_message_left_by_another_instance_runs_before_the_one_that_took_the_lease(
    make_app, fake_anthropic, sender
):
    """The lease taken at intake (a returning user) or with the account (a new
    user, whose first message another instance took) comes with what waited
    for the conversation: one run answers both, oldest first."""
    app = await open_app(make_app)
    if sender == "returning":
        assert (await app.pipeline.handle(message("hi"))).status == "answered"
    await leave_waiting(app)
    seen: list[str] = []

    def answer(body):  # type: ignore[no-untyped-def]
        seen.append(last_user_text(body))
        return text_reply("ok")

    fake_anthropic.responder = answer
    assert (await app.pipeline.handle(message("and this"))).status == "answered"
    await app.pipeline.idle()
    assert len(seen) == 1  # one run answered both
    assert seen[0].index("left for you") < seen[0].index("and this")
    async with app.store.read() as s:
        states = (await s.exec(select(InboxItem.state))).all()
    assert set(states) == {"answered"}
    assert await leases_held(app) == []


async def test_a_conversation_run_by_another_instance_is_left_to_it(make_app, fake_anthropic):
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    key = message("x").conversation_key
    elsewhere = Leases(app.store, "instance-b", 30)
    held = await elsewhere.acquire(CONVERSATION_LEASE + key)
    assert held is not None
    calls = fake_anthropic.request_count
    outcome = await app.pipeline.handle(message("while b runs it"))
    assert outcome.status == "queued"  # left in the inbox for instance b
    assert fake_anthropic.request_count == calls
    [lease] = await leases_held(app)
    assert (lease.owner, lease.token) == ("instance-b", held.token)  # untouched
    async with app.store.read() as s:
        waiting = (await s.exec(select(InboxItem).where(InboxItem.state == "pending"))).all()
    assert [i.payload["text"] for i in waiting if i.payload] == ["while b runs it"]


async def test_messages_at_once_to_one_conversation_are_each_answered_and_free_it(
    make_app, fake_anthropic
):
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(message(f"burst {i}", event_id=f"e{i}")) for i in range(8))
    )
    assert {o.status for o in outcomes} <= {"answered", "merged"}
    assert await leases_held(app) == []
    async with app.store.read() as s:
        states = (await s.exec(select(InboxItem.state))).all()
    assert set(states) == {"answered"} and len(states) == 9


async def test_when_the_intake_transaction_fails_after_the_lease_nothing_is_kept(
    make_app, fake_anthropic
):
    """The database refuses the claim of a message another instance left for
    the conversation (a trigger raises), in the write that stores the new
    message and takes the lease: the platform gets the failure (and delivers
    again), nothing of that write stays (no message, no lease, the left one
    still waiting), and the redelivery is answered once, with the left one."""
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    await leave_waiting(app)
    await install(app, refuse_claims(app.store.is_sqlite))
    again = message("are you there?", event_id="ev-1")
    with pytest.raises(DBAPIError, match="claim refused"):  # the platform is not acknowledged
        await app.pipeline.handle(again)
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(InboxItem).where(InboxItem.event_id == "ev-1"))).all() == []
        waiting = (await s.exec(select(InboxItem.state).where(InboxItem.event_id == "b-1"))).one()
    assert waiting == "pending"
    async with app.store.write() as s:
        await s.exec(text("DELETE FROM refuse_claims"))  # type: ignore[call-overload]
    seen: list[str] = []

    def answer(body):  # type: ignore[no-untyped-def]
        seen.append(last_user_text(body))
        return text_reply("ok")

    fake_anthropic.responder = answer
    assert (await app.pipeline.handle(again)).status == "answered"
    assert (await app.pipeline.handle(again)).status == "duplicate"
    await app.pipeline.idle()
    assert len(seen) == 1 and "left for you" in seen[0] and "are you there?" in seen[0]
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert set((await s.exec(select(InboxItem.state))).all()) == {"answered"}


async def test_a_new_users_message_refused_before_its_run_hands_the_lease_back(
    make_app, fake_anthropic
):
    app = await open_app(make_app)
    too_big = Attachment(
        "document", "f1", "video.mp4", "video/mp4", 50_000_000, problem="too large"
    )
    refused = await app.pipeline.handle(message("", attachments=(too_big,)))
    assert refused.status == "refused"
    assert await leases_held(app) == []  # taken with the account, handed back
    assert (await app.pipeline.handle(message("now a real question"))).status == "answered"
    assert await leases_held(app) == []


async def test_when_the_account_transaction_fails_after_the_lease_nothing_is_kept(
    make_app, fake_anthropic
):
    """The database refuses the claim of a message another instance left for
    the conversation, in the transaction creating a new user's account after
    the conversation's lease was taken in it (a trigger raises): no account,
    no lease stays behind, the message fails without a model call, and the
    next one creates the account and is answered, with the left one."""
    app = await open_app(make_app)
    await leave_waiting(app)
    await install(app, refuse_claims(app.store.is_sqlite))
    calls = fake_anthropic.request_count
    assert (await app.pipeline.handle(message("hello", event_id="e1"))).status == "failed"
    assert fake_anthropic.request_count == calls
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(func.count()).select_from(User))).one() == 0
    async with app.store.write() as s:
        await s.exec(text("DELETE FROM refuse_claims"))  # type: ignore[call-overload]
    assert (await app.pipeline.handle(message("hello again", event_id="e2"))).status == "answered"
    await app.pipeline.idle()
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(func.count()).select_from(User))).one() == 1
        state = (await s.exec(select(InboxItem.state).where(InboxItem.event_id == "b-1"))).one()
    assert state == "answered"


async def test_on_postgres_the_message_its_lease_and_the_claim_are_one_statement(
    make_app, fake_anthropic
):
    """A returning user's message to a conversation this process is not
    working on: storing it, taking the conversation's lease and claiming what
    waited for it are one statement (one round trip), and all of it counts."""
    app = await open_app(make_app)
    if app.store.is_sqlite:
        pytest.skip("SQLite runs them as one transaction of statements (no round trips)")
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    await leave_waiting(app)
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("and this"))).status == "answered"
    await app.pipeline.idle()
    [intake] = [s for s in seen if "INSERT INTO inbox" in s]
    assert intake.startswith("WITH") and "INSERT INTO leases" in intake
    assert "UPDATE inbox" in intake  # the claim
    assert seen.index(intake) == 0  # the first statement of the message
    async with app.store.read() as s:
        assert set((await s.exec(select(InboxItem.state))).all()) == {"answered"}
    assert await leases_held(app) == []


async def test_a_returning_users_lease_says_whom_the_run_answers_even_if_the_account_changed(
    make_app, fake_anthropic
):
    """A user seen here before, their record no longer fresh, has the lease
    taken with the message (the user id as last known here); when the account
    changed since (merged on another instance, say: here a stale cached id),
    the run corrects whom the lease says it runs for before answering, which
    decides who may /stop it from another instance."""
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    identity = app.pipeline.s.identity
    [(key, (_, record, username))] = identity._cache.items()
    stale = dataclasses.replace(record, id=record.id + 1000)
    identity._cache[key] = (0.0, stale, username)  # long ago, and another id
    release = threading.Event()
    fake_anthropic.script(text_reply("answered", hold=release))
    with statements(app) as seen:
        run = asyncio.create_task(app.pipeline.handle(message("again")))
        try:
            await fake_anthropic.wait_for_requests(2)  # the run is under way
            [lease] = await leases_held(app)
            assert lease.user_id == record.id
        finally:
            release.set()
        assert (await run).status == "answered"
    assert await leases_held(app) == []
    # taken with the message, before the account was read again
    took = next(i for i, sql in enumerate(seen) if "INSERT INTO leases" in sql)
    read = next(i for i, sql in enumerate(seen) if "FROM users" in sql)
    assert took < read, seen[: read + 1]


async def test_a_lease_that_cannot_be_relabelled_still_answers_and_is_freed(
    make_app, fake_anthropic, caplog
):
    """The correction of whom the lease names fails (the database is away for
    it): the run goes on under the lease it holds, logs it, and frees it."""
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    identity = app.pipeline.s.identity
    [(key, (_, record, username))] = identity._cache.items()
    identity._cache[key] = (0.0, dataclasses.replace(record, id=record.id + 1000), username)

    async def unavailable(*_args: object) -> None:
        raise DBAPIError("UPDATE leases", None, Exception("database is away"))

    app.pipeline.s.leases.relabel = unavailable
    assert (await app.pipeline.handle(message("again"))).status == "answered"
    assert "lease.relabel_failed" in caplog.text
    assert await leases_held(app) == []
