"""/budget and /usage for one's own account, guests included, however the
caller names themselves; other people's stay admin-only; an unlimited budget
shows what was used and nothing that only a limit gives meaning to."""

from __future__ import annotations

import re

from sqlalchemy import update
from sqlmodel import col, select

from bot.accounts.identity import current_period
from bot.store.models import Budget, PlatformLink
from tests.commands.test_admin_commands import audit, open_app, say, user_id
from tests.fakes.anthropic import FakeUsage, text_reply
from tests.harness import message

OWN = re.compile(r"^Used 0 of 5,000 tokens this month \(5,000 left\)\. Resets \d{4}-\d\d-\d\d\.$")
"""A guest's own budget before any run (no name, role or limit mode in it)."""


async def test_a_guest_sees_their_own_budget_and_usage_by_any_of_their_names(make_app):
    app, _ = await open_app(make_app)
    assert OWN.match(await say(app, "/budget"))
    bob = await user_id(app, "console", "bob")
    for token in ("console:bob", str(bob), f"#{bob}"):
        assert OWN.match(await say(app, f"/budget {token}")), token
    usage = await say(app, "/usage console:bob")
    assert usage == (
        f"Your usage in {current_period()}: 0 tokens (0 in, 0 out, 0 cache), about $0.0000, 0 runs."
    )

    slack = {"platform": "slack", "platform_channel_id": "C1", "chat_type": "group"}
    assert OWN.match(
        await say(app, "/budget <@U9>", user="U9", mentioned_user_ids=("U9",), **slack)
    )
    assert OWN.match(await say(app, "/budget <@U9|me>", user="U9", **slack))
    telegram = {"platform": "telegram", "platform_channel_id": "-100", "chat_type": "group"}
    text_mention = await say(
        app, "/budget Bob Smith", user="777", mentioned_user_ids=("777",), **telegram
    )
    assert OWN.match(text_mention)  # a Telegram text mention of oneself

    # Another platform's account linked to bob's is bob too.
    code = re.search(r"`(\w+)`", await say(app, "/link"))
    assert code is not None
    await say(app, f"/link {code[1]}", user="U5", platform="slack", platform_channel_id="D5")
    assert OWN.match(await say(app, "/budget console:bob", user="U5", platform="slack"))
    assert [e.outcome for e in await audit(app)] == ["ok"]  # the link; nothing was refused


async def test_someone_elses_budget_stays_admin_only_and_creates_no_one(make_app):
    app, _ = await open_app(make_app)
    await say(app, "/help", user="carol")
    refusals = {
        "/budget console:carol": "/budget for someone else needs the admin role (you are guest).",
        "/budget console:nobody": "/budget for someone else needs the admin role (you are guest).",
        "/usage console:carol": "/usage for someone else needs the admin role (you are guest).",
    }
    for text, refusal in refusals.items():
        assert await say(app, text) == refusal
    slack = {"platform": "slack", "platform_channel_id": "C1", "chat_type": "group"}
    mentioned = await say(app, "/budget <@U77>", user="U9", mentioned_user_ids=("U77",), **slack)
    assert mentioned == "/budget for someone else needs the admin role (you are guest)."
    async with app.store.read() as s:
        created = await s.exec(select(PlatformLink).where(PlatformLink.platform_user_id == "U77"))
        assert created.first() is None  # a refused mention made no account
    entries = [(e.action, e.outcome) for e in await audit(app)]
    assert entries == [("/budget", "denied")] * 2 + [("/usage", "denied"), ("/budget", "denied")]
    shown = await say(app, "/budget console:carol", user="root")
    assert shown.startswith("**carol (#") and "limit: role default" in shown


async def test_an_unlimited_budget_shows_usage_without_overage(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    fake_anthropic.script(text_reply("hi", usage=FakeUsage(input_tokens=1, output_tokens=0)))
    await app.pipeline.handle(message("hello", platform_user_id="bob", user_display_name="bob"))
    await say(app, "/setbudget console:bob 1", user="root")
    bob = await user_id(app, "console", "bob")
    async with app.store.write() as s:  # a run that went 2 tokens past the limit of 1
        await s.exec(update(Budget).where(col(Budget.user_id) == bob).values(used=1, overage=2))
    limited = await say(app, "/budget")
    assert limited.startswith("Used 1 of 1 token this month (0 left). Resets ")
    assert limited.endswith(" (2 tokens over the limit)")

    unlimited = "Budget: unlimited. Used this month: 3 tokens."
    assert await say(app, "/setbudget console:bob unlimited", user="root") == (
        f"Budget of bob (#{bob}, console:bob) set.\n{unlimited}"
    )
    assert await say(app, "/budget") == unlimited
    assert await say(app, "/grant console:bob 1k", user="root") == (
        f"Granted 1,000 tokens to bob (#{bob}, console:bob).\n{unlimited}"
    )
    assert await say(app, "/budget console:bob", user="root") == (
        f"**bob (#{bob}, console:bob)**, role guest\n{unlimited} (limit: none)"
    )
    usage = await say(app, "/usage")
    assert "1 token (1 in, 0 out, 0 cache)" in usage and usage.endswith(", 1 run.")
