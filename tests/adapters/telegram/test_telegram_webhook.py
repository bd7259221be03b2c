"""Webhook mode for both libraries (the fake Bot API server delivers updates to
POST /telegram/webhook on the service's web server, as Telegram does), and what happens
to an update the pipeline cannot take, in both modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from adapters.telegram import WEBHOOK_PATH
from bot.store.models import InboxItem
from tests.adapters.telegram.rig import PUBLIC_URL, WEBHOOK_SECRET, Rig
from tests.fakes.anthropic import text_reply
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram_updates import FakeClock, private

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@pytest.fixture
async def rig(database, fake_anthropic) -> AsyncIterator[Rig]:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    async with FakeTelegram(clock=clock.now, webhook_retry_delay=0.01) as telegram:
        rig = Rig(database, fake_anthropic, telegram, clock)
        try:
            yield rig
        finally:
            await rig.close()


async def test_webhook_mode_sets_the_webhook_and_answers(rig, library, fake_anthropic):
    await rig.open(library, mode="webhook")
    [set_webhook] = rig.telegram.calls_to("setWebhook")
    assert set_webhook.params["url"] == PUBLIC_URL
    assert set_webhook.params["secret_token"] == WEBHOOK_SECRET
    assert set_webhook.params["allowed_updates"] == ["message", "edited_message", "callback_query"]
    assert rig.telegram.commands is not None

    fake_anthropic.script(text_reply("Hi from the webhook."))
    update_id = await rig.deliver(private("hello"))
    assert [c.visible_text for c in rig.telegram.sent()] == ["Hi from the webhook."]
    assert rig.telegram.webhook is not None
    assert rig.telegram.webhook.deliveries == [(update_id, 200)]
    assert rig.telegram.calls_to("getUpdates") == []
    assert rig.telegram.calls_to("deleteWebhook") == []


async def post(url: str, body: object, secret: str | None) -> int:
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status


async def test_a_wrong_or_missing_secret_is_refused_and_nothing_processed(
    rig, library, fake_anthropic
):
    app = await rig.open(library, mode="webhook")
    url = f"{app.web.url}{WEBHOOK_PATH}"
    update = {"update_id": 77, **private("hello")}
    assert await post(url, update, "wrong-secret") == 403
    assert await post(url, update, None) == 403
    assert await post(url, update, WEBHOOK_SECRET[:-1]) == 403
    await app.pipeline.drain(5)
    assert fake_anthropic.request_count == 0
    assert rig.telegram.calls_to("sendMessage") == []
    async with app.store.read() as session:
        assert (await session.exec(select(InboxItem))).all() == []
    assert await post(url, {"no": "update"}, WEBHOOK_SECRET) == 400


async def test_a_webhook_retry_is_answered_once(rig, library, fake_anthropic):
    """Telegram posts an update again when it did not see our 200 in time."""
    app = await rig.open(library, mode="webhook")
    url = f"{app.web.url}{WEBHOOK_PATH}"
    fake_anthropic.script(text_reply("Once."))
    update = {"update_id": 900, **private("hello")}
    assert await post(url, update, WEBHOOK_SECRET) == 200
    assert await post(url, update, WEBHOOK_SECRET) == 200
    await app.pipeline.drain(30)
    assert [c.visible_text for c in rig.telegram.sent()] == ["Once."]
    assert fake_anthropic.request_count == 1


def fail_claims(app, times: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The database refuses the next `times` inbox writes (as if it were down)."""
    inbox = app.pipeline.s.inbox
    real_accept = inbox.accept
    failed: list[str] = []

    async def accept(msg: Any, **kwargs: Any) -> bool:
        if len(failed) < times:
            failed.append(msg.dedupe_key)
            raise OperationalError("INSERT INTO inbox", {}, Exception("db down"))
        return bool(await real_accept(msg, **kwargs))

    inbox.accept = accept
    return failed


async def test_webhook_answers_500_until_the_update_is_taken(rig, library, fake_anthropic):
    app = await rig.open(library, mode="webhook")
    failed = fail_claims(app, 2)
    fake_anthropic.script(text_reply("Got it eventually."))
    update_id = await rig.deliver(private("hello"))
    assert len(failed) == 2
    assert rig.telegram.webhook.deliveries == [(update_id, 500), (update_id, 500), (update_id, 200)]
    assert [c.visible_text for c in rig.telegram.sent()] == ["Got it eventually."]


async def test_polling_asks_again_for_an_update_that_was_not_taken(rig, library, fake_anthropic):
    app = await rig.open(library)
    failed = fail_claims(app, 1)
    fake_anthropic.script(text_reply("Second time lucky."))
    update_id = await rig.deliver(private("hello"))
    assert failed == [f"123456789:{update_id}"]
    polls = [c.params.get("offset") for c in rig.telegram.calls_to("getUpdates")]
    assert update_id + 1 in polls
    assert polls.index(update_id + 1) > 0  # only after a second look at the update
    assert [c.visible_text for c in rig.telegram.sent()] == ["Second time lucky."]
    assert rig.clock.sleeps  # backed off before asking again
