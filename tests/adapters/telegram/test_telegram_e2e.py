"""End to end, for both libraries (aiogram, python-telegram-bot) in polling mode: updates
pushed into the fake Bot API server, the real pipeline and store, the anthropic SDK
against the fake Messages API, and assertions on the Bot API calls the adapter made."""

from __future__ import annotations

import base64
import io
import itertools

import pytest
from PIL import Image
from sqlmodel import select

from adapters.telegram.render import visible_len
from bot.store.models import DeliveryFailure, InboxItem, Message
from tests.fakes.anthropic import text_reply
from tests.fakes.telegram import ApiError, flood
from tests.fakes.telegram_updates import GROUP_ID, group, message_id, private

pytestmark = pytest.mark.slow  # seconds a test (tests/tiers.py)

USER = 5120348871


async def test_private_text_gets_one_valid_reply(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("Hello **Rosa** <3 & co"))
    await rig.deliver(private("hi there"))

    [sent] = rig.telegram.sent()
    assert sent.chat_id == str(USER)
    assert sent.params["parse_mode"] == "HTML"
    assert sent.params["text"] == "Hello <b>Rosa</b> &lt;3 &amp; co"
    assert sent.visible_text == "Hello Rosa <3 & co"
    assert "reply_parameters" not in sent.params  # private chats: a plain answer
    assert fake_anthropic.last_request.messages[-1]["content"][0]["text"] == "hi there"
    actions = rig.telegram.calls_to("sendChatAction")
    assert actions and actions[0].params == {"chat_id": USER, "action": "typing"}
    methods = [c.method for c in rig.telegram.calls]
    assert methods.index("getMe") < methods.index("setMyCommands") < methods.index("getUpdates")
    assert "deleteWebhook" in methods and "setWebhook" not in methods
    menu = {c["command"]: c["description"] for c in rig.telegram.commands or []}
    assert menu["help"] == "Show the commands you can use"
    assert menu["new"] == "Start a fresh conversation in this channel"
    assert "budget" in menu and "setbudget" not in menu  # admin commands stay unlisted


async def test_group_message_without_mention_makes_no_call(rig, library, fake_anthropic):
    await rig.open(library)
    await rig.deliver(group("anyone up for lunch?"))
    assert rig.telegram.calls_to("sendMessage") == []
    assert rig.telegram.calls_to("sendChatAction") == []
    assert fake_anthropic.request_count == 0


async def test_kept_group_context_reaches_the_next_question(rig, library, fake_anthropic):
    app = await rig.open(library, keep_group_context=True)
    fake_anthropic.script(text_reply("Pizza, it seems."))
    await rig.deliver(group("the team voted for pizza"))
    assert fake_anthropic.request_count == 0 and rig.telegram.calls_to("sendMessage") == []
    await rig.deliver(group("what did we vote for?", mention=True))

    [sent] = rig.telegram.sent()
    assert sent.visible_text == "Pizza, it seems."
    sent_history = str(fake_anthropic.last_request.messages)
    assert "the team voted for pizza" in sent_history
    async with app.store.read() as session:
        texts = [m.text for m in (await session.exec(select(Message))).all()]
    assert any("the team voted for pizza" in t for t in texts)


async def test_mention_in_a_topic_is_answered_in_that_topic(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("All green."))
    update = group("status?", mention=True, topic=77)
    await rig.deliver(update)

    [sent] = rig.telegram.sent()
    assert sent.chat_id == str(GROUP_ID)
    assert sent.params["message_thread_id"] == 77
    assert sent.params["reply_parameters"]["message_id"] == message_id(update)
    assert rig.telegram.calls_to("sendChatAction")[0].params["message_thread_id"] == 77


async def test_reply_to_the_bot_is_answered_as_a_reply(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("Then we restart it."))
    update = group("and then?", reply_to_bot=True)
    await rig.deliver(update)

    [sent] = rig.telegram.sent()
    assert sent.chat_id == str(GROUP_ID)
    assert "message_thread_id" not in sent.params
    assert sent.params["reply_parameters"]["message_id"] == message_id(update)


async def test_a_redelivered_update_is_answered_once(rig, library, fake_anthropic):
    """Telegram sends an update again when the polling offset was not confirmed (the
    process stopped first): the durable dedupe on bot_id:update_id stops a 2nd answer."""
    app = await rig.open(library)
    fake_anthropic.script(text_reply("Only once."))
    update = private("hello")
    update_id = await rig.deliver(update)
    await rig.restart_adapter()
    await rig.deliver({**update, "update_id": update_id})

    assert [c.visible_text for c in rig.telegram.sent()] == ["Only once."]
    assert fake_anthropic.request_count == 1
    async with app.store.read() as session:
        events = (await session.exec(select(InboxItem))).all()
    assert [(e.platform, e.event_id) for e in events] == [("telegram", f"123456789:{update_id}")]


async def test_flood_wait_is_honoured_and_the_reply_delivered_once(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("after the wait"))
    rig.telegram.fail_next("sendMessage", flood(3), chat_id=USER)
    await rig.deliver(private("hi"))

    first, second = rig.telegram.calls_to("sendMessage")
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 3
    assert second.params["text"] == first.params["text"] == "after the wait"
    assert len(rig.telegram.sent()) == 1


async def test_a_reply_that_cannot_be_delivered_is_recorded(rig, library, fake_anthropic):
    app = await rig.open(library)
    fake_anthropic.script(text_reply("You will not see this."))
    blocked = ApiError(403, "Forbidden: bot was blocked by the user")
    rig.telegram.fail_next("sendMessage", blocked, chat_id=USER)
    await rig.deliver(private("hi"))

    assert [c.status for c in rig.telegram.calls_to("sendMessage")] == [403]  # not retried
    async with app.store.read() as session:
        [failure] = (await session.exec(select(DeliveryFailure))).all()
    assert (failure.platform, failure.channel_id) == ("telegram", str(USER))
    assert failure.text == "You will not see this."
    assert "DeliveryFailed" in failure.reason and "bot was blocked by the user" in failure.reason


def long_reply() -> str:
    """Over 10,000 characters: headings, emoji, `<>&` everywhere, code blocks, and one
    code block longer than a whole message (it must become several closed <pre>s)."""
    parts = []
    for n in range(12):
        parts.append(f'## Part {n} — 🚀 <tags> & "quotes"\n\nSome **bold** text, `x < y && z`.')
        lines = 120 if n == 7 else 12
        code = "\n".join(f"if a[{i}] < b && c > d: print('{i} 🐍 &amp;')" for i in range(lines))
        parts.append(f"```python\n{code}\n```")
        parts.append("- item with <angle> brackets & ampersands " * 3)
    text = "\n\n".join(parts)
    assert len(text) >= 10_000
    return text


async def test_a_long_reply_arrives_as_valid_chunks(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply(long_reply()))
    await rig.deliver(private("tell me everything"))

    calls = rig.telegram.calls_to("sendMessage")
    assert len(calls) >= 3
    assert all(c.ok for c in calls), [c.description for c in calls if not c.ok]
    assert all(visible_len(c.params["text"]) <= 4096 for c in calls)
    seen = "\n".join(c.visible_text or "" for c in calls)
    for n in range(12):
        assert f'Part {n} — 🚀 <tags> & "quotes"' in seen
        assert "if a[11] < b && c > d: print('11 🐍 &amp;')" in seen
    assert "if a[119] < b && c > d: print('119 🐍 &amp;')" in seen
    assert seen.index("Part 3") < seen.index("Part 4") < seen.index("a[119]") < seen.index("Part 8")
    assert sum(c.params["text"].count("<pre>") for c in calls) >= 13  # the long one split
    gaps = [b.at - a.at for a, b in itertools.pairwise(calls)]
    assert all(gap >= 1.0 for gap in gaps)


async def test_no_reply_sends_nothing(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("NO_REPLY"))
    await rig.deliver(private("ok thanks"))
    assert fake_anthropic.request_count == 1
    assert rig.telegram.calls_to("sendMessage") == []


async def test_start_and_help_answer_without_the_llm(rig, library, fake_anthropic):
    await rig.open(library)
    await rig.deliver(private("/start"))
    await rig.deliver(group("/help@switchboard_test_bot"))
    start, help_ = rig.telegram.sent()
    assert "/budget" in (start.visible_text or "") and "/budget" in (help_.visible_text or "")
    assert help_.chat_id == str(GROUP_ID)
    assert fake_anthropic.request_count == 0


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


async def test_image_and_document_are_offered_to_the_agent(rig, library, fake_anthropic):
    await rig.open(library)
    fake_anthropic.script(text_reply("A tiny image."), text_reply("The log says OK."))
    photo_id = rig.telegram.add_file(PNG, path="photos/file_9.jpg")
    photo = [{"file_id": photo_id, "file_unique_id": "u1", "width": 1, "height": 1}]
    await rig.deliver(private(None, photo=photo, caption="what is this?"))
    doc_id = rig.telegram.add_file(b"deploy: OK\n")
    document = {"file_id": doc_id, "file_unique_id": "u2", "file_name": "deploy.log",
                "mime_type": "text/plain", "file_size": 11}  # fmt: skip
    await rig.deliver(private(None, document=document))

    first, second = fake_anthropic.requests
    blocks = first.messages[-1]["content"]
    image = next(b for b in blocks if b["type"] == "image")
    # The model's copy is re-encoded (bot.media): the same pixel, its alpha kept, so a PNG,
    # whatever the file's name says.
    assert image["source"]["media_type"] == "image/png"
    sent = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert sent.format == "PNG"
    assert sent.convert("RGBA").getpixel((0, 0)) == Image.open(io.BytesIO(PNG)).getpixel((0, 0))
    texts = [b["text"] for b in second.messages[-1]["content"] if b["type"] == "text"]
    assert any('<document name="deploy.log">\ndeploy: OK' in t for t in texts)
    assert [c.visible_text for c in rig.telegram.sent()] == ["A tiny image.", "The log says OK."]


async def test_an_oversize_file_gets_a_clear_reply(rig, library, fake_anthropic):
    await rig.open(library, max_file_bytes=1000)
    big = {"file_id": "BQACbig", "file_unique_id": "u3", "file_name": "dump.txt",
           "mime_type": "text/plain", "file_size": 5000}  # fmt: skip
    await rig.deliver(private(None, document=big))
    unsized_id = rig.telegram.add_file(b"x" * 3000)  # the update does not say its size
    unsized = {"file_id": unsized_id, "file_unique_id": "u4", "file_name": "more.txt"}
    await rig.deliver(private(None, document=unsized))

    replies = [c.visible_text for c in rig.telegram.sent()]
    assert replies == [
        "I couldn't use dump.txt: it is too large (4.9 KB; the limit is 1000 bytes).",
        "I couldn't use more.txt: it is too large (2.9 KB; the limit is 1000 bytes).",
    ]
    assert [c.params["file_id"] for c in rig.telegram.calls_to("getFile")] == [unsized_id]
    assert rig.telegram.calls_to("download") == []
    assert fake_anthropic.request_count == 0


async def test_edited_messages_only_when_configured(rig, library, fake_anthropic):
    await rig.open(library)
    edit = private("fixed typo")
    await rig.deliver({"edited_message": edit["message"]})
    assert rig.telegram.calls_to("sendMessage") == []
    assert rig.telegram.calls_to("getUpdates")[0].params["allowed_updates"] == [
        "message",
        "edited_message",
        "callback_query",
    ]

    await rig.close()
    rig.apps.clear()
    fake_anthropic.script(text_reply("Noted the edit."))
    await rig.open(library, handle_edited=True)
    await rig.deliver({"edited_message": private("fixed typo again")["message"]})
    assert [c.visible_text for c in rig.telegram.sent()] == ["Noted the edit."]
