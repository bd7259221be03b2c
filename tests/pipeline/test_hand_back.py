"""After a run: how its replies' deliveries ended, the messages another
instance left for the conversation meanwhile, and the conversation's lease,
written all or nothing (`bot.pipeline.hand_back`); on PostgreSQL as one
statement."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy import text
from sqlmodel import select

from bot.pipeline.intake import Inbox
from bot.store.models import InboxItem, OutboxItem
from bot.types import Reply
from tests.fakes.anthropic import last_user_text, text_reply
from tests.harness import RecordingAdapter, message
from tests.pipeline.test_early_lease import install, leases_held, refuse_claims
from tests.pipeline.test_hot_path import statements
from tests.waiting import wait_until


class LeavingAdapter(RecordingAdapter):
    """Sends; after the first reply (the run still holds the conversation),
    runs `leave`: another instance leaving a message for the conversation."""

    leave: Callable[[], Awaitable[None]] | None = None

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        parts = await super().send(reply, progress)
        leave, self.leave = self.leave, None
        if leave is not None:
            await leave()
        return parts


async def open_app(make_app):  # type: ignore[no-untyped-def]
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = LeavingAdapter()
    app.attach(adapter)
    return app, adapter


def leaving(app, event_id: str, words: str) -> Callable[[], Awaitable[None]]:  # type: ignore[no-untyped-def]
    """Another instance accepts a message for the conversation and leaves it
    waiting (it found the conversation busy)."""

    async def leave() -> None:
        other = Inbox(app.store, "instance-b", 30)
        left = dataclasses.replace(message(words), event_id=event_id)
        assert await other.accept(left)
        assert await other.requeue(left.platform, [event_id]) == 1

    return leave


async def states(app) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    async with app.store.read() as s:
        inbox = (await s.exec(select(InboxItem.state).order_by(InboxItem.id))).all()
        outbox = (await s.exec(select(OutboxItem.state).order_by(OutboxItem.id))).all()
    return {"inbox": list(inbox), "outbox": list(outbox)}


async def settled(app) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """`states` once the last run has recorded its end (after its send)."""
    for _ in range(200):
        now = await states(app)
        if "pending" not in now["outbox"] and not await leases_held(app):
            return now
        await asyncio.sleep(0.02)
    return await states(app)


async def test_a_message_left_during_a_run_is_taken_at_its_end_and_answered_next(
    make_app, fake_anthropic
):
    app, adapter = await open_app(make_app)
    asked: list[str] = []

    def answer(body):  # type: ignore[no-untyped-def]
        asked.append(last_user_text(body))
        return text_reply(f"answer {len(asked)}")

    fake_anthropic.responder = answer
    adapter.leave = leaving(app, "b-1", "left during the run")
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("hi"))).status == "answered"
        await wait_until(lambda: len(adapter.sent) == 2)  # the left message ran next, here
    assert len(asked) == 2
    assert "left during the run" in asked[1] and "hi" not in asked[1]
    assert adapter.texts == ["answer 1", "answer 2"]
    assert await settled(app) == {"inbox": ["answered"] * 2, "outbox": ["sent"] * 2}
    assert await leases_held(app) == []
    ends = [s for s in seen if "DELETE FROM leases" in s]
    if app.store.is_sqlite:  # one transaction of three statements
        assert ends and all(s.startswith("DELETE FROM leases") for s in ends)
    else:  # one statement: the claim, with the outbox's update and the lease's delete
        assert ends[0].startswith("WITH")
        assert "UPDATE outbox" in ends[0] and "UPDATE inbox" in ends[0]


async def test_with_no_message_waiting_here_the_end_of_a_run_is_one_write(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    fake_anthropic.responder = lambda body: text_reply("ok")
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    with statements(app) as seen:
        assert (await app.pipeline.handle(message("again"))).status == "answered"
    after_send = seen[next(i for i, s in enumerate(seen) if "UPDATE outbox" in s) :]
    assert sum("UPDATE outbox" in s for s in seen) == 1
    assert any("DELETE FROM leases" in s for s in after_send)
    if not app.store.is_sqlite:
        assert len(after_send) == 1  # outbox, inbox claim and lease: one statement
    assert await states(app) == {"inbox": ["answered"] * 2, "outbox": ["sent"] * 2}
    assert await leases_held(app) == []


async def test_when_the_end_of_a_run_fails_the_reply_is_recorded_and_the_left_message_waits(
    make_app, fake_anthropic, caplog
):
    """The database refuses the claim of the left message (a trigger raises):
    nothing of the combined write stays; the delivery's end is recorded and
    the lease freed on their own, and the left message waits in the inbox
    for the sweep (or the conversation's next message), not lost."""
    app, adapter = await open_app(make_app)
    fake_anthropic.responder = lambda body: text_reply("ok")
    await install(app, refuse_claims(app.store.is_sqlite))
    adapter.leave = leaving(app, "b-2", "left, then refused")
    caplog.set_level(logging.ERROR, "switchboard")
    assert (await app.pipeline.handle(message("hi"))).status == "answered"
    await app.pipeline.idle()
    assert "inbox.pending_not_taken" in caplog.text
    assert await states(app) == {"inbox": ["answered", "pending"], "outbox": ["sent"]}
    assert await leases_held(app) == []
    async with app.store.write() as s:
        await s.exec(text("DELETE FROM refuse_claims"))  # type: ignore[call-overload]
    assert (await app.pipeline.handle(message("next"))).status == "answered"
    assert adapter.texts == ["ok", "ok"]  # both answered, in one run
    assert set((await states(app))["inbox"]) == {"answered"}
