"""Builders of Bot API `Update` payloads for tests (shapes as in tests/data/telegram),
and a controllable clock for the adapter's rate limits."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tests.fakes.telegram import BOT_ID, BOT_USERNAME

GROUP_ID = -1001971186208
_message_ids = itertools.count(500)
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Switchboard", "username": BOT_USERNAME}


def person(user_id: int = 5120348871, first_name: str = "Rosa") -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": first_name}


def message(
    text: str | None,
    *,
    chat_id: int,
    user: dict[str, Any] | None = None,
    entities: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """`{"message": {...}}`; the fake assigns the update_id when it is pushed."""
    sender = user or person()
    chat: dict[str, Any] = (
        {"id": chat_id, "type": "supergroup", "title": "Platform team"}
        if chat_id < 0
        else {"id": chat_id, "type": "private", "first_name": sender["first_name"]}
    )
    body: dict[str, Any] = {
        "message_id": next(_message_ids),
        "from": sender,
        "chat": chat,
        "date": 1716906900,
    }
    if text is not None:
        body["text"] = text
    if entities:
        body["entities"] = entities
    body.update(extra)
    return {"message": body}


def private(text: str | None, user_id: int = 5120348871, **extra: Any) -> dict[str, Any]:
    return message(text, chat_id=user_id, user=person(user_id), **extra)


def group(
    text: str,
    *,
    mention: bool = False,
    reply_to_bot: bool = False,
    topic: int | None = None,
    chat_id: int = GROUP_ID,
    **extra: Any,
) -> dict[str, Any]:
    entities = []
    if mention:
        text = f"@{BOT_USERNAME} {text}"
        entities.append({"offset": 0, "length": len(BOT_USERNAME) + 1, "type": "mention"})
    if reply_to_bot:
        extra["reply_to_message"] = {
            "message_id": 400,
            "from": BOT_USER,
            "chat": {"id": chat_id, "type": "supergroup", "title": "Platform team"},
            "date": 1716906800,
            "text": "an earlier answer",
        }
    if topic is not None:
        extra.update(message_thread_id=topic, is_topic_message=True)
        extra["chat"] = {"id": chat_id, "type": "supergroup", "title": "Team", "is_forum": True}
    return message(text, chat_id=chat_id, entities=entities, **extra)


def press(
    command: str,
    *,
    user: dict[str, Any] | None = None,
    chat_id: int = GROUP_ID,
    message_id: int = 1,
    topic: int | None = None,
    query_id: str = "4382bfdwdsb323b2d9",
) -> dict[str, Any]:
    """`{"callback_query": {...}}`: `user` pressed a button (callback_data `command`)
    under the bot's message `message_id` in `chat_id`."""
    chat: dict[str, Any] = (
        {"id": chat_id, "type": "supergroup", "title": "Platform team"}
        if chat_id < 0
        else {"id": chat_id, "type": "private", "first_name": "Rosa"}
    )
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": BOT_USER,
        "chat": chat,
        "date": 1716906950,
        "text": "Schedule it? Confirm with /confirm K7Q2MX",
    }
    if topic is not None:
        message.update(message_thread_id=topic, is_topic_message=True)
    return {
        "callback_query": {
            "id": query_id,
            "from": user or person(),
            "message": message,
            "chat_instance": "-4011730093711950432",
            "data": command,
        }
    }


def message_id(update: dict[str, Any]) -> int:
    return int(update["message"]["message_id"])


class FakeClock:
    """Virtual time: `sleep` moves it to the sleeper's deadline at once (recording the
    duration) and yields.
    Sleeps of at least `hold_from` seconds wait for `release()` instead, so a test can
    look at what happens while something is waiting."""

    def __init__(self, start: float = 1000.0, hold_from: float | None = None) -> None:
        self.time = start
        self.sleeps: list[float] = []
        self.hold_from = hold_from
        self.holding = 0
        self._released = asyncio.Event()

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.time + max(0.0, seconds)
        if self.hold_from is not None and seconds >= self.hold_from:
            self.holding += 1
            try:
                await self._released.wait()
            finally:
                self.holding -= 1
        self.time = max(self.time, wake)  # sleepers with the same deadline wake together
        await asyncio.sleep(0)

    def release(self) -> None:
        self.hold_from = None
        self._released.set()
