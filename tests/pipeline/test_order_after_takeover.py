"""A conversation's next message never overtakes an earlier one that a dead
process left unfinished (the soak found replies out of order after every
kill and SIGTERM: the new message took the free conversation lease and ran
while the earlier one waited for recovery).

The earlier message is accepted by an "instance" that then dies mid-run: its
inbox row is running, leased to it. The next message waits (in the inbox);
the recovery sweep leaves it while the earlier lease lasts, then takes both
and answers them in order. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col

from bot.pipeline.intake import Inbox
from bot.store.models import InboxItem
from bot.types import utcnow
from tests.fakes.anthropic import last_user_text, text_reply
from tests.harness import RecordingAdapter, message


async def test_the_next_message_waits_for_an_earlier_one_a_dead_instance_held(
    make_app, fake_anthropic
) -> None:  # type: ignore[no-untyped-def]
    fake_anthropic.responder = lambda body: text_reply(
        "re: " + last_user_text(body).splitlines()[-1]
    )
    app = await make_app(budgets={"guest": "unlimited"})
    adapter = RecordingAdapter()
    app.attach(adapter)
    store = app.pipeline.s.store
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
    assert adapter.texts == ["re: first", "re: second"]
