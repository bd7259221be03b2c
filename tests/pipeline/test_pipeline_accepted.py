"""`Core.handle(on_accepted=...)`: called once the message is durably claimed, before the
agent runs, so an adapter may acknowledge the platform's delivery then."""

from __future__ import annotations

from sqlmodel import select

from bot.store.models import InboxItem
from tests.fakes.anthropic import text_reply
from tests.harness import RecordingAdapter, message


async def test_on_accepted_comes_after_the_claim_and_before_the_agent(make_app, fake_anthropic):
    app = await make_app()
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(text_reply("done"))
    seen: list[tuple[int, int]] = []

    async def claimed_events() -> int:
        async with app.store.read() as session:
            return len((await session.exec(select(InboxItem))).all())

    def on_accepted() -> None:  # what had happened when the message was taken
        seen.append((fake_anthropic.request_count, len(adapter.sent)))

    outcome = await app.pipeline.handle(message("hi", event_id="e-1"), on_accepted=on_accepted)
    assert outcome.status == "answered"
    assert seen == [(0, 0)]  # once, before any LLM call or reply
    assert await claimed_events() == 1 and adapter.texts == ["done"]


async def test_on_accepted_is_not_called_for_what_is_not_taken(make_app, fake_anthropic):
    app = await make_app()
    app.attach(RecordingAdapter())
    fake_anthropic.script(text_reply("first"))
    calls: list[str] = []
    await app.pipeline.handle(message("hi", event_id="e-2"), on_accepted=lambda: calls.append("1"))
    duplicate = await app.pipeline.handle(
        message("hi", event_id="e-2"), on_accepted=lambda: calls.append("dup")
    )
    ignored = await app.pipeline.handle(
        message("chatter", chat_type="group", event_id="e-3"),
        on_accepted=lambda: calls.append("group"),
    )
    assert (duplicate.status, ignored.status) == ("duplicate", "ignored")
    assert calls == ["1"]
