"""The conversation's lease taken with the message, at intake, or for a new
user's first message with their account (`bot.pipeline.early_lease`): the run
takes it over; a message that ends without a run hands it back; what other
instances left for the conversation runs with it; a lease held elsewhere is
left alone. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlmodel import func, select

from bot.pipeline.intake import CONVERSATION_LEASE, Inbox
from bot.store.leases import Leases
from bot.store.models import InboxItem, Lease, User
from bot.types import Attachment
from tests.fakes.anthropic import last_user_text, text_reply
from tests.harness import RecordingAdapter, message


async def open_app(make_app):  # type: ignore[no-untyped-def]
    app = await make_app(budgets={"guest": "unlimited"})
    app.attach(RecordingAdapter())
    return app


def cut_claims_in_transactions(inbox: Inbox, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The database fails the claim of waiting messages when it runs inside a
    transaction that took the conversation's lease; returns the real claim."""
    claim = inbox.claim_pending

    async def cut(key, limit=100, session=None):  # type: ignore[no-untyped-def]
        if session is not None:
            raise ConnectionError("database cut")
        return await claim(key, limit, session)

    monkeypatch.setattr(inbox, "claim_pending", cut)
    return claim


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
    # Another instance accepted a message for this conversation and left it
    # waiting (its run found the conversation busy).
    other = Inbox(app.store, "instance-b", 30)
    left = dataclasses.replace(message("left for you"), event_id="b-1")
    assert await other.accept(left)
    assert await other.requeue(left.platform, ["b-1"]) == 1
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
    make_app, fake_anthropic, monkeypatch
):
    """The database fails the inbox's transaction after the lease was taken in
    it: the platform gets the failure (and delivers again), no lease stays
    behind, and the redelivery is answered once."""
    app = await open_app(make_app)
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    inbox = app.pipeline.s.inbox
    claim = cut_claims_in_transactions(inbox, monkeypatch)
    again = message("are you there?", event_id="ev-1")
    with pytest.raises(ConnectionError):  # the platform is not acknowledged
        await app.pipeline.handle(again)
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(InboxItem).where(InboxItem.event_id == "ev-1"))).all() == []
    monkeypatch.setattr(inbox, "claim_pending", claim)
    calls = fake_anthropic.request_count
    assert (await app.pipeline.handle(again)).status == "answered"
    assert (await app.pipeline.handle(again)).status == "duplicate"
    assert fake_anthropic.request_count == calls + 1
    assert await leases_held(app) == []


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
    make_app, fake_anthropic, monkeypatch
):
    """The database fails the transaction creating a new user's account after
    the conversation's lease was taken in it: no account, no lease stays
    behind, the message is answered with an error notice, and the next one
    creates the account and is answered."""
    app = await open_app(make_app)
    inbox = app.pipeline.s.inbox
    claim = cut_claims_in_transactions(inbox, monkeypatch)
    calls = fake_anthropic.request_count
    assert (await app.pipeline.handle(message("hello", event_id="e1"))).status == "failed"
    assert fake_anthropic.request_count == calls
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(func.count()).select_from(User))).one() == 0
    monkeypatch.setattr(inbox, "claim_pending", claim)
    assert (await app.pipeline.handle(message("hello again", event_id="e2"))).status == "answered"
    assert await leases_held(app) == []
    async with app.store.read() as s:
        assert (await s.exec(select(func.count()).select_from(User))).one() == 1
