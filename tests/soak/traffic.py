"""The soak's traffic: a seeded plan of messages and the senders that play
each platform's side.

The plan (`plan`) is a list of `Planned` messages, each with its token
(``m:s0042``: platform letter, number) in its text, the conversation it
belongs to and when it is sent. Conversations: Slack DMs (plain, bursts of
several messages at once, streamed answers, memory and wakeup tool calls),
Slack channel threads with several people mentioning the bot, Telegram
private chats (webhook mode), and Discord guild channels (mentions, gateway).
Every person is a new guest, so each has the guest allowance: the heavy
talkers run out during the soak.

The senders play each conversation in order, one message after the other:
Slack's Events API is delivered signed and redelivered until answered 200
(`SlackSender`, as Slack does; a mention comes twice, as `message` and as
`app_mention`), Telegram's updates are queued on the fake Bot API, which
posts them to the webhook until answered 2xx, and Discord's are dispatched on
the gateway (no acknowledgement: the bot must catch up on what it missed).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import BOT_ID, CHANNEL_ID, OTHER_CHANNEL_ID
from tests.fakes.slack import BOT_USER_ID, event_body
from tests.fakes.telegram import FakeTelegram
from tests.fakes.telegram_updates import private
from tests.service_rig import SlackSender

SLACK_CHANNELS = ("C0SOAK1", "C0SOAK2")
DISCORD_CHANNELS = (CHANNEL_ID, OTHER_CHANNEL_ID)
DELIVERY_WITHIN_S = 600.0
"""How long Slack keeps redelivering one event before the harness gives up."""


@dataclass(frozen=True, slots=True)
class Planned:
    at: float
    """Seconds after the soak's start."""
    platform: str
    conversation: str
    """"slack:D…", "slack:C…/<root ts>", "telegram:<chat>", "discord:<channel>"."""
    user: str
    """The sender's platform user id."""
    token: str
    kind: str
    """plain | burst | stream | memory | wakeup"""
    text: str


@dataclass
class Sent:
    """What happened to a planned message on its platform's side."""

    planned: Planned
    order: int
    """Its place among its conversation's messages as sent (0, 1, …)."""
    accepted: bool = False
    accepted_at: float | None = None
    platform_id: str | None = None
    """Slack ts, Telegram update id, Discord message id."""


# -- the plan ---------------------------------------------------------------------------


@dataclass
class _Tokens:
    counters: dict[str, Any] = field(default_factory=dict)

    def next(self, platform: str) -> str:
        counter = self.counters.setdefault(platform, itertools.count(1))
        return f"m:{platform[0]}{next(counter):04d}"


def _times(rng: random.Random, count: int, start: float, end: float, gap: float) -> list[float]:
    """`count` sorted times in [start, end], at least about `gap` apart."""
    if count <= 0 or end <= start:
        return []
    times = sorted(rng.uniform(start, end) for _ in range(count))
    out: list[float] = []
    for t in times:
        out.append(max(t, out[-1] + gap) if out else t)
    return [t for t in out if t <= end + gap]


def plan(seed: int, seconds: float, *, wakeups_until: float) -> list[Planned]:
    """A seeded mix of messages sent within `seconds` (wakeups asked for before
    `wakeups_until`, so that they come due while the soak runs)."""
    rng = random.Random(seed)
    tokens = _Tokens()
    scale = max(seconds / 120.0, 0.5)
    out: list[Planned] = []

    def add(at: float, platform: str, conv: str, user: str, kind: str, text: str) -> None:
        token = tokens.next(platform)
        out.append(Planned(at, platform, conv, user, token, kind, text.format(token=token)))

    def directive(kind: str) -> str:
        return {"stream": " do:stream", "memory": " do:memory", "wakeup": " do:wakeup"}.get(
            kind, ""
        )

    # Slack DMs: light and heavy talkers; streams and memories mixed in.
    for n in range(round(10 * scale)):
        user, conv = f"U0SOAK{n:03d}", f"slack:D0SOAK{n:03d}"
        heavy = rng.random() < 0.4
        count = rng.randint(6, 9) if heavy else rng.randint(1, 3)
        remembers = rng.random() < 0.3
        for at in _times(rng, count, 2.0, seconds, 3.0):
            roll = rng.random()
            kind = "stream" if roll < 0.15 else "memory" if remembers and roll < 0.35 else "plain"
            add(at, "slack", conv, user, kind, "hello {token}" + directive(kind))
    # Slack DMs that ask for a wakeup (the model schedules it): one each, early.
    for n in range(round(3 * scale)):
        user, conv = f"U0WAKE{n:03d}", f"slack:D0WAKE{n:03d}"
        at = rng.uniform(2.0, max(wakeups_until, 3.0))
        add(at, "slack", conv, user, "wakeup", "remind me {token}" + directive("wakeup"))
    # Slack bursts: several messages to one DM at once.
    for n in range(round(3 * scale)):
        user, conv = f"U0BURST{n:03d}", f"slack:D0BURST{n:03d}"
        start = rng.uniform(5.0, max(seconds - 5.0, 6.0))
        for k in range(rng.randint(4, 6)):
            add(start + 0.05 * k, "slack", conv, user, "burst", "quick {token}")
    # Slack channel threads: a few people mentioning the bot in one thread.
    for n in range(round(4 * scale)):
        channel = SLACK_CHANNELS[n % len(SLACK_CHANNELS)]
        root = f"1700000{n:03d}.000100"
        conv = f"slack:{channel}/{root}"
        people = [f"U0GRP{n:03d}{k}" for k in range(rng.randint(2, 3))]
        for at in _times(rng, rng.randint(3, 6), 2.0, seconds, 2.0):
            add(
                at,
                "slack",
                conv,
                rng.choice(people),
                "plain",
                f"<@{BOT_USER_ID}> what now {{token}}",
            )
    # Telegram private chats (webhook).
    for n in range(round(6 * scale)):
        user = str(7_000_000_000 + n)
        heavy = rng.random() < 0.35
        count = rng.randint(6, 8) if heavy else rng.randint(1, 3)
        for at in _times(rng, count, 2.0, seconds, 3.0):
            kind = "stream" if rng.random() < 0.15 else "plain"
            add(at, "telegram", f"telegram:{user}", user, kind, "hi {token}" + directive(kind))
    # Discord guild channels: people mentioning the bot (gateway).
    for n in range(round(4 * scale)):
        user = str(1_500_000_000_000_000_100 + n)
        channel = DISCORD_CHANNELS[n % len(DISCORD_CHANNELS)]
        for at in _times(rng, rng.randint(1, 5), 2.0, seconds, 4.0):
            kind = "stream" if rng.random() < 0.15 else "plain"
            text = f"<@{BOT_ID}> hey {{token}}" + directive(kind)
            add(at, "discord", f"discord:{channel}", user, kind, text)
    out.sort(key=lambda p: p.at)
    return out


def by_conversation(planned: Iterable[Planned]) -> dict[str, list[Planned]]:
    out: dict[str, list[Planned]] = {}
    for p in sorted(planned, key=lambda p: p.at):
        out.setdefault(p.conversation, []).append(p)
    return out


# -- the senders ------------------------------------------------------------------------


def _slack_ts(index: int) -> str:
    return f"{int(time.time())}.{index:06d}"


@dataclass
class Senders:
    """Plays every conversation of the plan, each in order, all at once."""

    slack: SlackSender
    telegram: FakeTelegram
    discord: FakeDiscord
    started: float
    """loop.time() of the soak's start."""
    sent: list[Sent] = field(default_factory=list)
    _slack_index: Any = field(default_factory=lambda: itertools.count(1))

    async def play(self, planned: list[Planned]) -> None:
        tasks = [
            asyncio.create_task(self._conversation(messages))
            for messages in by_conversation(planned).values()
        ]
        await asyncio.gather(*tasks)

    async def _conversation(self, messages: list[Planned]) -> None:
        loop = asyncio.get_running_loop()
        for order, p in enumerate(messages):
            await asyncio.sleep(max(0.0, self.started + p.at - loop.time()))
            sent = Sent(p, order)
            self.sent.append(sent)
            send: Callable[[Planned, Sent], Any] = getattr(self, f"_{p.platform}")
            await send(p, sent)

    async def _slack(self, p: Planned, sent: Sent) -> None:
        ts = _slack_ts(next(self._slack_index))
        channel, _, root = p.conversation.removeprefix("slack:").partition("/")
        event: dict[str, Any] = {"channel": channel, "user": p.user, "text": p.text}
        event.update(ts=ts, event_ts=ts)
        if root:  # a reply in a thread whose first message the bot never saw
            event["thread_ts"] = root
            kinds = [("message", "channel"), ("app_mention", None)]
        else:
            kinds = [("message", "im")]
        sent.platform_id = ts
        try:
            for kind, channel_type in kinds:
                body = {**event, "type": kind}
                if channel_type is not None:
                    body["channel_type"] = channel_type
                await self.slack.deliver(event_body(body), within=DELIVERY_WITHIN_S)
        except AssertionError:
            return  # never acknowledged: not accepted
        sent.accepted, sent.accepted_at = True, time.time()

    async def _telegram(self, p: Planned, sent: Sent) -> None:
        update_id = self.telegram.push_update(private(p.text, int(p.user)))
        sent.platform_id = str(update_id)
        deadline = time.monotonic() + DELIVERY_WITHIN_S
        while not self.telegram.taken(update_id) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        if self.telegram.taken(update_id):
            sent.accepted, sent.accepted_at = True, time.time()

    async def _discord(self, p: Planned, sent: Sent) -> None:
        channel = p.conversation.removeprefix("discord:")
        author = {
            "id": p.user,
            "username": f"soak{p.user[-3:]}",
            "discriminator": "0",
            "global_name": None,
            "avatar": None,
            "public_flags": 0,
        }
        message = self.discord.user_message(p.text, channel_id=channel, author=author)
        sent.platform_id = str(message["id"])
        await self.discord.dispatch("MESSAGE_CREATE", message)
        sent.accepted, sent.accepted_at = True, time.time()  # no acknowledgement on Discord
