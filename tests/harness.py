"""A recording adapter: the test harness that lets a test "send" a message
through the real pipeline and read the replies (errbot's idea)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from bot.errors import DeliveryFailed
from bot.ports import Core
from bot.types import IncomingMessage, Reply, Target


@dataclass
class RecordingAdapter:
    platform: str = "console"
    sent: list[Reply] = field(default_factory=list)
    typing: list[Target] = field(default_factory=list)
    fail_sends: bool = False
    core: Core | None = None

    async def start(self, core: Core) -> None:
        self.core = core

    async def stop(self) -> None:
        self.core = None

    async def send(self, reply: Reply, progress: object = None) -> list[str]:
        if self.fail_sends:
            raise DeliveryFailed("platform said no")
        self.sent.append(reply)
        return [str(len(self.sent))]

    async def show_typing(self, target: Target) -> None:
        self.typing.append(target)
        await asyncio.sleep(0)

    @property
    def texts(self) -> list[str]:
        return [reply.text for reply in self.sent]


def message(text: str, **fields: Any) -> IncomingMessage:
    values: dict[str, Any] = {
        "platform": "console",
        "platform_user_id": "alice",
        "platform_channel_id": "room",
        "user_display_name": "Alice",
    }
    values.update(fields)
    return IncomingMessage(text=text, **values)


class SoleLeader:
    """A `Leadership` for test cores: this instance always holds it."""

    held = True

    async def wait(self) -> None:
        return None

    async def lost(self) -> None:
        await asyncio.Event().wait()
