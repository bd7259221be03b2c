"""The pipeline end to end in-process: real store (SQLite and PostgreSQL), the
real anthropic SDK against the fake Messages API, a recording adapter."""

from __future__ import annotations

import asyncio
import base64
import io

from PIL import Image
from sqlmodel import col, select

from bot.pipeline import delivery
from bot.store.models import (
    Conversation,
    DeliveryFailure,
    InboxItem,
    Message,
    Run,
    StoredFile,
    TokenLog,
    User,
)
from bot.types import Attachment
from tests.fakes.anthropic import (
    FakeUsage,
    overloaded_error,
    text_reply,
    tool_call,
    tool_use_reply,
)
from tests.harness import RecordingAdapter, message
from tests.media import samples
from tests.probes import ProbeTool
from tests.waiting import wait_until


async def open_app(make_app, **sections):  # type: ignore[no-untyped-def]
    app = await make_app(**sections)
    adapter = RecordingAdapter()
    app.attach(adapter)
    return app, adapter


async def test_reply_is_delivered_and_whole_turn_persisted(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    fake_anthropic.script(
        tool_use_reply(tool_call("current_time", {"timezone": "UTC"}), text="Checking."),
        text_reply(
            "It is **late**.",
            usage=FakeUsage(input_tokens=100, output_tokens=20, cache_read_input_tokens=50),
        ),
    )
    outcome = await app.pipeline.handle(message("what time is it?"))

    assert outcome.status == "answered"
    assert adapter.texts == ["It is **late**."]
    async with app.store.read() as s:
        rows = (await s.exec(select(Message).order_by(col(Message.id)))).all()
        logs = (await s.exec(select(TokenLog))).all()
        run = (await s.exec(select(Run))).one()
    assert [r.role for r in rows] == ["user", "assistant", "tool_call", "tool_result", "assistant"]
    assert rows[0].text == "what time is it?"
    assert rows[2].tool_name == "current_time" and rows[2].data == {"timezone": "UTC"}
    assert rows[3].tool_use_id == rows[2].tool_use_id and "UTC" in rows[3].text
    assert rows[4].text == "It is **late**."
    assert {r.run_id for r in rows} == {run.id}
    assert run.status == "completed" and run.iterations == 2
    assert len(logs) == 2
    assert logs[1].input_tokens == 100 and logs[1].cache_read_tokens == 50
    assert logs[1].cost_usd > 0


async def test_history_is_sent_on_the_next_message(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    fake_anthropic.script(text_reply("Hi Alice."), text_reply("You said hello."))
    await app.pipeline.handle(message("hello"))
    await app.pipeline.handle(message("what did I say?"))

    sent = fake_anthropic.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"][0]["text"] == "hello"
    assert sent[1]["content"][0]["text"] == "Hi Alice."


async def test_conversation_per_thread(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    await app.pipeline.handle(message("in thread one", platform_thread_id="t1"))
    await app.pipeline.handle(message("in thread two", platform_thread_id="t2"))
    await app.pipeline.handle(message("one again", platform_thread_id="t1"))

    async with app.store.read() as s:
        keys = sorted((await s.exec(select(Conversation.key))).all())
    assert keys == ["console:room:t1", "console:room:t2"]
    third = fake_anthropic.requests[2].messages
    assert [m["content"][0]["text"] for m in third if m["role"] == "user"] == [
        "in thread one",
        "one again",
    ]


async def test_no_reply_sends_nothing_but_records_a_silent_turn(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    fake_anthropic.script(text_reply("  **NO_REPLY**  "))
    outcome = await app.pipeline.handle(message("ok thanks"))

    assert outcome.status == "silent"
    assert adapter.sent == []
    async with app.store.read() as s:
        last = (await s.exec(select(Message).order_by(col(Message.id).desc()))).first()
    assert last is not None and last.silent and last.text == "NO_REPLY"


async def test_reply_is_sanitized(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    fake_anthropic.script(text_reply("<thinking>private plan</thinking>\n\nThe answer is 4."))
    await app.pipeline.handle(message("2+2?"))
    assert adapter.texts == ["The answer is 4."]


async def test_group_message_without_mention_is_ignored(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    outcome = await app.pipeline.handle(message("chatter", chat_type="group"))
    assert outcome.status == "ignored"
    assert fake_anthropic.request_count == 0 and adapter.sent == []

    outcome = await app.pipeline.handle(
        message("@bot hi", chat_type="group", mentions_bot=True, platform_message_id="m7")
    )
    assert outcome.status == "answered"
    reply = adapter.sent[0]
    assert reply.target.reply_to_message_id == "m7"  # groups: answer as a reply
    assert fake_anthropic.last_request.messages[-1]["content"][0]["text"] == "[Alice] @bot hi"


async def test_duplicate_event_is_answered_once(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    first = await app.pipeline.handle(message("hi", event_id="u-1"))
    again = await app.pipeline.handle(message("hi", event_id="u-1"))

    assert (first.status, again.status) == ("answered", "duplicate")
    assert len(adapter.sent) == 1 and fake_anthropic.request_count == 1
    async with app.store.read() as s:
        event = (await s.exec(select(InboxItem))).one()
    assert event.state == "answered" and event.finished_at is not None


async def test_concurrent_duplicates_are_answered_once(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    outcomes = await asyncio.gather(
        *(app.pipeline.handle(message("hi", event_id="u-2")) for _ in range(5))
    )
    assert sorted(o.status for o in outcomes) == ["answered"] + ["duplicate"] * 4
    assert len(adapter.sent) == 1


async def test_budget_spent_refuses_without_llm_call(make_app, fake_anthropic):
    # The first call fits the allowance; what it really used leaves too little
    # for another (budget reservations: no call may spend past the allowance).
    app, adapter = await open_app(make_app, budgets={"guest": 5000})
    fake_anthropic.script(text_reply("sure", usage=FakeUsage(input_tokens=4500, output_tokens=450)))
    await app.pipeline.handle(message("first"))
    assert fake_anthropic.request_count == 1

    outcome = await app.pipeline.handle(message("second"))
    assert outcome.status == "refused"
    assert fake_anthropic.request_count == 1  # no LLM call
    assert "allowance" in adapter.sent[-1].text and adapter.sent[-1].kind == "refusal"


async def test_owner_from_config_is_unlimited(make_app, fake_anthropic):
    app, _ = await open_app(make_app, budgets={"guest": 1}, admin={"owners": ["console:alice"]})
    for text in ("one", "two", "three"):
        assert (await app.pipeline.handle(message(text))).status == "answered"
    async with app.store.read() as s:
        user = (await s.exec(select(User))).one()
    assert user.role == "owner"


async def test_provider_error_is_reported_and_recorded(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    fake_anthropic.script(overloaded_error())
    outcome = await app.pipeline.handle(message("hello?"))

    assert outcome.status == "failed"
    assert adapter.sent[0].kind == "error" and "overloaded" in adapter.sent[0].text
    async with app.store.read() as s:
        run = (await s.exec(select(Run))).one()
        rows = (await s.exec(select(Message))).all()
    assert run.status == "failed" and "Overloaded" in (run.error or "")
    assert [r.text for r in rows] == ["hello?"]  # the user's message is kept

    fake_anthropic.script(text_reply("back again"))
    await app.pipeline.handle(message("retry"))
    assert adapter.texts[-1] == "back again"
    sent = fake_anthropic.last_request.messages
    assert [m["role"] for m in sent] == ["user"]  # the unanswered message is merged in
    assert [b["text"] for b in sent[0]["content"]][:2] == ["hello?", "retry"]
    assert sent[0]["content"][2]["text"].startswith("<turn_context>\nCurrent time: ")


async def test_failed_delivery_is_recorded(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    adapter.fail_sends = True
    outcome = await app.pipeline.handle(message("hi", platform_thread_id="t9"))

    assert outcome.status == "answered"
    async with app.store.read() as s:
        failure = (await s.exec(select(DeliveryFailure))).one()
    assert failure.conversation_key == "console:room:t9"
    assert failure.text == "echo: hi" and "platform said no" in failure.reason


async def test_commands_never_reach_the_llm(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    for text in ("/help", "/budget", "/nonsense"):
        outcome = await app.pipeline.handle(message(text))
        assert outcome.status == "command"
    assert fake_anthropic.request_count == 0
    assert "/budget" in adapter.texts[0] and "/new" in adapter.texts[0]
    assert "of 5,000 tokens" in adapter.texts[1]
    assert adapter.texts[2] == "Unknown command /nonsense. Try /help."


async def test_new_starts_a_fresh_history(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    await app.pipeline.handle(message("remember 42"))
    await app.pipeline.handle(message("/new"))
    await app.pipeline.handle(message("what number?"))
    sent = fake_anthropic.last_request.messages
    assert len(sent) == 1 and sent[0]["content"][0]["text"] == "what number?"


async def test_history_limit_keeps_recent_turns(make_app, fake_anthropic):
    app, _ = await open_app(
        make_app,
        llm={"history_turns": 2},
        agent={"history_step": 1},
        budgets={"guest": "unlimited"},
    )
    for i in range(5):
        await app.pipeline.handle(message(f"message {i}"))
    sent = fake_anthropic.last_request.messages
    user_texts = [m["content"][0]["text"] for m in sent if m["role"] == "user"]
    assert user_texts == ["message 2", "message 3", "message 4"]


async def test_typing_indicator_is_shown_while_running(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    await app.pipeline.handle(message("hi"))
    assert adapter.typing and adapter.typing[0].channel_id == "room"


async def test_no_typing_indicator_while_the_run_waits_for_its_slot(
    make_app, fake_anthropic, monkeypatch
):
    """The model answered but the service is busy (one message at work at a
    time here): the waiting run sends no indicators meanwhile; it does while
    the model works."""
    monkeypatch.setattr(delivery, "TYPING_INTERVAL_S", 0.05)
    gate = asyncio.Event()

    async def held(tool: ProbeTool, args: object) -> str:
        await gate.wait()
        return "found"

    lookup = ProbeTool("lookup", held)
    app = await make_app(tools=[lookup], budgets={"guest": "unlimited"}, inbox={"max_busy": 1})
    adapter = RecordingAdapter()
    app.attach(adapter)
    fake_anthropic.script(
        text_reply("Quick one.", delay=0.5),  # the first message's answer
        tool_use_reply(tool_call("lookup")),  # the second's: it holds the slot in the tool
        text_reply("Found."),
    )

    def shown_in_a() -> int:
        return sum(1 for target in adapter.typing if target.channel_id == "a")

    first = asyncio.create_task(app.pipeline.handle(message("q", platform_channel_id="a")))
    await wait_until(lambda: fake_anthropic.request_count == 1)
    second = asyncio.create_task(
        app.pipeline.handle(message("look", platform_user_id="bob", platform_channel_id="b"))
    )
    await wait_until(lambda: lookup.calls)
    await asyncio.sleep(0.7)  # the first's answer is in: it waits for the slot
    waiting_from = shown_in_a()
    assert waiting_from >= 3  # shown while the model worked
    await asyncio.sleep(0.5)
    assert shown_in_a() == waiting_from  # none while it waited

    gate.set()
    assert (await first).status == "answered" and (await second).status == "answered"


async def test_images_and_text_documents_reach_the_model(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    png = samples.encoded("PNG", (40, 30))
    msg = message(
        "what is in these?",
        attachments=(
            Attachment("image", "f1", "cat.png", "image/png", len(png), data=png),
            Attachment("document", "f2", "notes.txt", "text/plain", 11, data=b"hello notes"),
        ),
    )
    assert (await app.pipeline.handle(msg)).status == "answered"

    blocks = fake_anthropic.last_request.messages[-1]["content"]
    image = next(b for b in blocks if b["type"] == "image")
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/jpeg"
    copy = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert copy.size == (40, 30)
    assert any('<document name="notes.txt">\nhello notes' in b.get("text", "") for b in blocks)
    async with app.store.read() as s:
        stored = (await s.exec(select(StoredFile).order_by(col(StoredFile.id)))).all()
        user_row = (await s.exec(select(Message).where(Message.role == "user"))).one()
    assert [(f.name, f.data) for f in stored] == [("cat.png", png), ("notes.txt", b"hello notes")]
    assert "[Image: cat.png, 40×30]" in user_row.text and "hello notes" not in user_row.text


async def test_unusable_attachment_gets_a_clear_reply_without_llm_call(make_app, fake_anthropic):
    app, adapter = await open_app(make_app)
    too_big = Attachment(
        "document",
        "f3",
        "video.mp4",
        "video/mp4",
        50_000_000,
        problem="too large (47.7 MB, the limit is 10 MB)",
    )
    outcome = await app.pipeline.handle(message("", attachments=(too_big,)))
    assert outcome.status == "refused"
    assert fake_anthropic.request_count == 0
    assert adapter.texts == ["I couldn't use video.mp4: too large (47.7 MB, the limit is 10 MB)."]

    binary = Attachment(
        "document", "f4", "blob.bin", "application/octet-stream", 4, data=b"\x00\x01\x02\x03"
    )
    outcome = await app.pipeline.handle(message("and this?", attachments=(binary,)))
    assert outcome.status == "answered" and fake_anthropic.request_count == 1
    assert "unsupported file type application/octet-stream" in adapter.texts[1]
    assert adapter.texts[2].startswith("echo:")


async def test_group_context_is_kept_when_configured(make_app, fake_anthropic):
    app, adapter = await open_app(make_app, telegram={"keep_group_context": True})
    group = {"platform": "telegram", "chat_type": "group"}
    outcome = await app.pipeline.handle(message("the deploy is at 5pm", **group))
    assert outcome.status == "context" and adapter.sent == []

    await app.pipeline.handle(message("@bot when is the deploy?", mentions_bot=True, **group))
    sent = fake_anthropic.last_request.messages
    assert len(sent) == 1  # both in one user turn
    assert [b["text"] for b in sent[0]["content"]][:2] == [
        "[Alice] the deploy is at 5pm",
        "[Alice] @bot when is the deploy?",
    ]
