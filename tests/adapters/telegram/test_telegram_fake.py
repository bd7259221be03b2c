"""The fake Bot API server itself: its HTML rules, and its protocol as both real client
libraries see it (what the adapter tests rely on)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from adapters.telegram.render import render, visible_len
from tests.fakes.telegram import TOKEN, FakeTelegram
from tests.fakes.telegram_html import HtmlError, parse_html
from tests.fakes.telegram_updates import private

VALID = [
    ("plain", "plain"),
    ("<b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins>", "bsieun"),
    ("<s>s</s><strike>t</strike><del>d</del>", "std"),
    ('<span class="tg-spoiler">x</span><tg-spoiler>y</tg-spoiler>', "xy"),
    ('<a href="https://e.com/?a=1&amp;b=2">link</a>', "link"),
    ('<pre><code class="language-python">if a &lt; b:</code></pre>', "if a < b:"),
    ("<pre>x</pre><code>y</code>", "xy"),
    ("<blockquote>q <b>b</b></blockquote><blockquote expandable>e</blockquote>", "q be"),
    ("&lt;&gt;&amp;&quot;&#128512;&#x1F600;", '<>&"😀😀'),
    ("<B>upper case tags</B>", "upper case tags"),
    ("<b>bold <i>both</i></b>", "bold both"),
]

INVALID = [
    ("<b>open", 'Can\'t find end tag corresponding to start tag "b"'),
    ("close</b>", "Unexpected end tag at byte offset 5"),
    ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
    ("<script>x</script>", 'Unsupported start tag "script" at byte offset 0'),
    ("é <foo>", 'Unsupported start tag "foo" at byte offset 3'),
    ("a < b", "Unclosed start tag at byte offset 2"),
    ("a > b", 'Unescaped ">" at byte offset 2'),
    ("Q&A", "Unsupported HTML entity at byte offset 1"),
    ("&nbsp;", "Unsupported HTML entity at byte offset 0"),
    ("<a>no href</a>", 'Tag "a" must have attribute "href"'),
    ("<span>x</span>", 'Tag "span" must have class "tg-spoiler"'),
    ('<code class="language-py">x</code>', "Programming language can't be specified"),
    ("<code><b>x</b></code>", 'Tag "b" can\'t be inside code or pre'),
    ('<a href="http://x"><a href="http://y">z</a></a>', 'Tag "a" can\'t be inside a link'),
    ("<blockquote><blockquote>x</blockquote></blockquote>", "Blockquotes can't be nested"),
]


@pytest.mark.parametrize(("text", "visible"), VALID, ids=[v[0][:30] for v in VALID])
def test_html_telegram_accepts(text: str, visible: str):
    assert parse_html(text) == visible


@pytest.mark.parametrize(("text", "error"), INVALID, ids=[v[0][:30] for v in INVALID])
def test_html_telegram_refuses(text: str, error: str):
    with pytest.raises(HtmlError) as caught:
        parse_html(text)
    assert error in str(caught.value)


ATOMS = [
    "**b**", "*i*", "~~s~~", "||sp||", "`c<>&`", "[l](https://x.y/?a=1&b=2)",
    "![img](http://i/c.png)", "<b>raw</b>", "&amp;", "&", "<", ">", '"q"', "🚀", "👋🏽", "\n",
    "\n\n", "# H ", "> quote ", "- item ", "1. one ", "```py\ncode < & >\n```", "---",
    "| a | b |\n|---|---|\n| 1 | 2 |\n", "**bold *it `code`* x**", "[**b** `c`](http://x)",
    "> > nested", "  - sub", "<https://auto.link>", "word ", "longword" * 30 + " ",
]  # fmt: skip


@pytest.mark.slow
def test_every_rendered_chunk_is_valid_telegram_html():
    """The renderer against these rules, over hundreds of seeded random documents."""
    rng = random.Random(20261122)
    for _ in range(600):
        markdown = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 60)))
        if rng.random() < 0.05:
            markdown *= 60
        for chunk in render(markdown):
            visible = parse_html(chunk)
            assert visible.strip()
            assert visible_len(chunk) == len(visible.encode("utf-16-le")) // 2 <= 4096


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def test_protocol_through_aiogram(fake: FakeTelegram):
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.exceptions import TelegramBadRequest, TelegramUnauthorizedError

    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))
    try:
        sent = await bot.send_message(chat_id=42, text="<b>draft</b>", parse_mode="HTML")
        edited = await bot.edit_message_text(
            chat_id=42, message_id=sent.message_id, text="<i>final</i>", parse_mode="HTML"
        )
        assert isinstance(edited, object) and fake.calls[-1].visible_text == "final"
        with pytest.raises(TelegramBadRequest, match="message is not modified"):
            await bot.edit_message_text(chat_id=42, message_id=sent.message_id, text="final")
        with pytest.raises(TelegramBadRequest, match="can't parse entities"):
            await bot.send_message(chat_id=42, text="<b>x", parse_mode="HTML")
        with pytest.raises(TelegramBadRequest, match="message is too long"):
            await bot.send_message(chat_id=42, text="x" * 4097)
        await long_polling(fake, lambda offset, wait: bot.get_updates(offset=offset, timeout=wait))
    finally:
        await bot.session.close()
    other = Bot("1:wrong", session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))
    try:
        with pytest.raises(TelegramUnauthorizedError):
            await other.get_me()
    finally:
        await other.session.close()


async def test_protocol_through_python_telegram_bot(fake: FakeTelegram):
    from telegram import Bot
    from telegram.error import BadRequest, InvalidToken

    base = fake.base_url
    bot = Bot(TOKEN, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot")
    async with bot:
        sent = await bot.send_message(chat_id=42, text="<b>draft</b>", parse_mode="HTML")
        await bot.edit_message_text(
            chat_id=42, message_id=sent.message_id, text="<i>final</i>", parse_mode="HTML"
        )
        assert fake.calls[-1].visible_text == "final"
        with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
            await bot.edit_message_text(chat_id=42, message_id=sent.message_id, text="final")
        with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
            await bot.send_message(chat_id=42, text="<b>x", parse_mode="HTML")
        await long_polling(fake, lambda offset, wait: bot.get_updates(offset=offset, timeout=wait))
    with pytest.raises(InvalidToken):
        await Bot("1:wrong", base_url=f"{base}/bot").get_me()


async def long_polling(fake: FakeTelegram, get_updates) -> None:  # type: ignore[no-untyped-def]
    """A waiting getUpdates returns when an update arrives; an update stays until a
    getUpdates with a higher offset confirms it; confirmed ones are forgotten."""
    waiting = asyncio.create_task(get_updates(None, 20))
    await fake.wait_for(lambda: bool(fake.calls_to("getUpdates")))
    first = fake.push_update(private("one"))
    [update] = await waiting
    assert update.update_id == first
    again = await get_updates(None, 0)
    assert [u.update_id for u in again] == [first]  # not confirmed yet
    second = fake.push_update(private("two"))
    assert [u.update_id for u in await get_updates(first + 1, 0)] == [second]
    assert fake.pending_updates == [second] and fake.taken(first) and not fake.taken(second)


@pytest.mark.parametrize("library", ["aiogram", "python-telegram-bot"])
async def test_streaming_methods_through_both_libraries(fake: FakeTelegram, library: str):
    from adapters.telegram.factory import make_transport
    from adapters.telegram.transport import BadRequest, RateLimited, TelegramApiError
    from tests.fakes.telegram import flood

    transport = make_transport(library, TOKEN, fake.base_url)  # type: ignore[arg-type]
    try:
        await transport.send_message_draft("42", 7, "<b>so</b> far", html=True, thread_id="3")
        assert fake.drafts == {("42", 7): "so far"}
        [draft] = fake.calls_to("sendMessageDraft")
        assert draft.params == {
            "chat_id": 42,
            "draft_id": 7,
            "text": "<b>so</b> far",
            "parse_mode": "HTML",
            "message_thread_id": 3,
        }
        with pytest.raises(BadRequest, match=r"(?i)TEXTDRAFT_PEER_INVALID"):
            await transport.send_message_draft("-1001", 7, "x", html=False)
        with pytest.raises(BadRequest, match=r"(?i)DRAFT_ID_INVALID"):
            await transport.send_message_draft("42", 0, "x", html=False)
        fake.fail_next("sendMessageDraft", flood(4))
        with pytest.raises(RateLimited) as limited:
            await transport.send_message_draft("42", 7, "x", html=False)
        assert limited.value.retry_after == 4
        fake.drafts_supported = False
        with pytest.raises(TelegramApiError):
            await transport.send_message_draft("42", 7, "x", html=False)

        sent = await transport.send_message("-1001", "one", html=False)
        await transport.edit_message_text("-1001", sent, "<i>two</i>", html=True)
        with pytest.raises(BadRequest) as same:
            await transport.edit_message_text("-1001", sent, "two", html=False)
        assert same.value.not_modified
        await transport.edit_message_text("-1001", sent, "two", html=False, buttons=[("Go", "/go")])
        edit = fake.calls_to("editMessageText")[-1]
        assert edit.ok and edit.params["reply_markup"]["inline_keyboard"][0][0]["text"] == "Go"
        assert fake.shown(-1001) == {int(sent): "two"}
        await transport.delete_message("-1001", sent)
        assert fake.shown(-1001) == {}
        with pytest.raises(BadRequest) as gone:
            await transport.delete_message("-1001", sent)
        assert gone.value.message_gone
        with pytest.raises(BadRequest) as gone:
            await transport.edit_message_text("-1001", sent, "three", html=False)
        assert gone.value.message_gone
    finally:
        await transport.close()
