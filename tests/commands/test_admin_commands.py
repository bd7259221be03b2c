"""Slash commands for budgets, roles, usage and personas, through the real
pipeline: happy paths, refusals, audit entries, and `@user` in every
platform's mention format."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import col, select

from bot.store.models import AuditEntry, PlatformLink, User
from tests.fakes.anthropic import FakeUsage, text_reply
from tests.harness import RecordingAdapter, message

OWNERS = ["console:root", "slack:UA", "discord:100", "telegram:1"]


async def open_app(make_app: Any, **sections: Any) -> tuple[Any, dict[str, RecordingAdapter]]:
    app = await make_app(admin={"owners": OWNERS}, **sections)
    adapters = {}
    for platform in ("console", "slack", "discord", "telegram"):
        adapters[platform] = RecordingAdapter(platform=platform)
        app.attach(adapters[platform])
    return app, adapters


async def say(app: Any, text: str, user: str = "bob", **fields: Any) -> str:
    fields.setdefault("platform_channel_id", f"dm-{user}")
    fields.setdefault("user_display_name", user)
    outcome = await app.pipeline.handle(message(text, platform_user_id=user, **fields))
    assert outcome.status == "command", outcome
    (reply,) = outcome.replies
    return reply.text


async def audit(app: Any) -> list[AuditEntry]:
    async with app.store.read() as s:
        return list((await s.exec(select(AuditEntry).order_by(col(AuditEntry.id)))).all())


async def user_id(app: Any, platform: str, account: str) -> int:
    async with app.store.read() as s:
        link = (
            await s.exec(
                select(PlatformLink).where(
                    PlatformLink.platform == platform, PlatformLink.platform_user_id == account
                )
            )
        ).one()
    return link.user_id


async def test_help_shows_what_the_role_may_use(make_app):
    app, _ = await open_app(make_app)
    guest = await say(app, "/help")
    assert "/budget" in guest and "/usage" in guest and "/link" in guest and "/new" in guest
    assert "/setbudget" not in guest and "/role" not in guest
    owner = await say(app, "/help", user="root")
    for name in ("/setbudget", "/grant", "/resetbudget", "/role", "/persona"):
        assert name in owner


async def test_budget_own_and_refused_for_someone_else(make_app):
    app, _ = await open_app(make_app)
    assert "Used 0 of 5,000 tokens this month (5,000 left)" in await say(app, "/budget")
    await say(app, "/budget", user="carol")
    refused = await say(app, "/budget console:carol")
    assert refused == "/budget for someone else needs the admin role (you are guest)."
    (entry,) = await audit(app)
    assert (entry.actor, entry.action, entry.outcome) == ("console:bob", "/budget", "denied")
    assert entry.where == "console:dm-bob:-" and entry.details is not None
    assert entry.details["args"] == "console:carol"
    shown = await say(app, "/budget console:carol", user="root")
    assert "carol" in shown and "console:carol" in shown and "limit: role default" in shown


async def test_setbudget_grant_and_reset(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    fake_anthropic.script(text_reply("hi", usage=FakeUsage(input_tokens=300, output_tokens=100)))
    await app.pipeline.handle(message("hello", platform_user_id="bob", user_display_name="bob"))

    refused = await say(app, "/setbudget console:bob 1m")
    assert refused == "/setbudget needs the admin role (you are guest)."

    text = await say(app, "/setbudget console:bob 50k", user="root")
    assert "Budget of bob" in text and "Used 400 of 50,000 tokens" in text
    assert "Used 400 of 50,000 tokens" in await say(app, "/budget")
    text = await say(app, "/grant console:bob 1,000", user="root")
    assert "Granted 1,000 tokens" in text and "of 51,000 tokens" in text
    text = await say(app, "/resetbudget console:bob", user="root")
    assert "Used 0 of 51,000 tokens" in text
    assert "unlimited" in await say(app, "/setbudget console:bob unlimited", user="root")
    reset = await say(app, "/setbudget console:bob default", user="root")
    assert "of 6,000 tokens" in reset and "(includes 1,000 granted)" in reset  # 5,000 + grant
    bad = await say(app, "/setbudget console:bob lots", user="root")
    assert bad.startswith("'lots' is not a token count")
    assert "Usage: /setbudget @user <tokens | unlimited | default>" in bad

    entries = [(e.actor, e.action, e.outcome, e.target) for e in await audit(app)]
    assert entries == [
        ("console:bob", "/setbudget", "denied", None),
        ("console:root", "/setbudget", "ok", "console:bob"),
        ("console:root", "/grant", "ok", "console:bob"),
        ("console:root", "/resetbudget", "ok", "console:bob"),
        ("console:root", "/setbudget", "ok", "console:bob"),
        ("console:root", "/setbudget", "ok", "console:bob"),
    ]
    details = (await audit(app))[1].details
    bob = await user_id(app, "console", "bob")
    assert details == {"user_id": bob, "mode": "fixed", "tokens": 50000}


async def test_roles_only_owners_make_admins_and_changes_apply_at_once(make_app):
    app, _ = await open_app(make_app)
    assert "of 5,000 tokens" in await say(app, "/budget")  # bob is cached as a guest
    await say(app, "/help", user="alice")
    assert await say(app, "/role console:alice admin", user="root") == (
        "alice (#2, console:alice) is now admin (was guest)."
    )

    text = await say(app, "/role console:bob user", user="alice")
    assert text.endswith("is now user (was guest).")
    assert "of 200,000 tokens" in await say(app, "/budget")  # no stale cache

    assert await say(app, "/role console:bob admin", user="alice") == (
        "Only an owner can make admins."
    )
    assert await say(app, "/role console:root guest", user="alice") == (
        "root (#3, console:root) is an owner (set in [admin] owners)\n"
        "Usage: /role @user <guest | user | admin>"
    )
    await say(app, "/role console:bob admin", user="root")
    assert await say(app, "/role console:bob guest", user="alice") == (
        "Only an owner can change an admin's role."
    )
    assert (await say(app, "/role console:alice owner", user="root")).startswith(
        "owners are set in the config file"
    )
    denied = [e for e in await audit(app) if e.outcome == "denied"]
    assert [(e.actor, e.action, e.details["reason"]) for e in denied if e.details] == [
        ("console:alice", "/role", "Only an owner can make admins."),
        ("console:alice", "/role", "Only an owner can change an admin's role."),
    ]
    async with app.store.read() as s:
        roles = {u.display_name: u.role for u in (await s.exec(select(User))).all()}
    assert roles == {"root": "owner", "bob": "admin", "alice": "admin"}


async def test_usage_own_and_all(make_app, fake_anthropic):
    app, _ = await open_app(make_app)
    fake_anthropic.script(
        text_reply("a", usage=FakeUsage(input_tokens=1000, output_tokens=200)),
        text_reply("b", usage=FakeUsage(input_tokens=10, output_tokens=5)),
    )
    await app.pipeline.handle(message("hello", platform_user_id="bob", user_display_name="bob"))
    await app.pipeline.handle(
        message("hi", platform="slack", platform_user_id="UA", platform_channel_id="D1")
    )
    own = await say(app, "/usage")
    assert own.startswith("Your usage in ") and "1,200 tokens (1,000 in, 200 out, 0 cache)" in own
    assert own.endswith("1 run.")
    assert await say(app, "/usage all") == "/usage all needs the admin role (you are guest)."
    report = await say(app, "/usage all", user="root")
    lines = report.splitlines()
    assert "1,215 tokens" in lines[0]
    assert lines[2].startswith("1. bob (#") and "1,200 tokens" in lines[2]
    assert lines[2].endswith(", 1 run")
    assert "- console: 1,200 tokens" in report and "- slack: 15 tokens" in report
    assert "- claude-sonnet-5-5: 1,215 tokens" in report
    other = await say(app, "/usage slack:UA", user="root")
    assert "Usage of" in other and "15 tokens" in other


async def test_persona_show_and_set(make_app):
    app, _ = await open_app(make_app)
    assert await say(app, "/persona") == (
        "Persona: **default** — A helpful, concise team assistant (the default here).\n"
        "Available: default."
    )
    refused = await say(app, "/persona default")
    assert refused == "Setting the persona needs the admin role (you are guest)."
    unknown = await say(app, "/persona pirate", user="root")
    assert unknown.startswith("No persona named 'pirate'. Available: default.")
    assert await say(app, "/persona default", user="root") == (
        "This channel uses the default persona again: **default**."
    )
    entries = await audit(app)
    assert [(e.action, e.outcome) for e in entries] == [("/persona", "denied"), ("/persona", "ok")]


@pytest.mark.parametrize(
    ("platform", "admin", "token", "mentioned", "account"),
    [
        ("slack", "UA", "<@U2>", ("U2",), "U2"),
        ("slack", "UA", "<@U2|bob>", ("U2",), "U2"),
        ("discord", "100", "<@222>", ("222",), "222"),
        ("discord", "100", "<@!222>", ("222",), "222"),
        ("telegram", "1", "@bobby", (), "42"),
        ("telegram", "1", "@BobBy", (), "42"),
    ],
)
async def test_mentions_resolve_on_each_platform(
    make_app, platform, admin, token, mentioned, account
):
    app, _ = await open_app(make_app)
    where = {"platform": platform, "platform_channel_id": "g1", "chat_type": "group"}
    await app.pipeline.handle(  # the target has written before (telegram: with @username)
        message("/help", platform_user_id=account, user_username="bobby", **where)
    )
    text = await say(app, f"/grant {token} 500", user=admin, mentioned_user_ids=mentioned, **where)
    assert "Granted 500 tokens to Alice (#" in text and f"{platform}:{account}" in text


async def test_a_mention_of_someone_new_creates_them_and_unknown_targets_fail(make_app):
    app, _ = await open_app(make_app)
    slack = {"platform": "slack", "platform_channel_id": "C1"}
    text = await say(app, "/role <@U77> user", user="UA", mentioned_user_ids=("U77",), **slack)
    assert "slack:U77" in text and "is now user (was guest)" in text
    unverified = await say(app, "/role <@U88> user", user="UA", **slack)
    assert unverified.startswith("I don't know <@U88> on slack yet.")
    assert (await say(app, "/budget console:nobody", user="root")).startswith(
        "no user has the account console:nobody."
    )
    assert (await say(app, "/budget #999", user="root")).startswith("there is no user #999.")
    assert (await say(app, "/budget @ghost", user="root")).startswith(
        "I don't know @ghost on console yet"
    )
    assert (await say(app, "/grant", user="root")).startswith("Say who:")


async def test_telegram_text_mention_and_ids(make_app):
    app, _ = await open_app(make_app)
    telegram = {"platform": "telegram", "platform_channel_id": "-100"}
    await app.pipeline.handle(
        message("/help", platform_user_id="777", user_display_name="Bob Smith", **telegram)
    )
    # A text_mention: the name as text, the id from the adapter; the amount comes last.
    text = await say(app, "/grant Bob Smith 700", user="1", mentioned_user_ids=("777",), **telegram)
    assert "Granted 700 tokens to Bob Smith" in text and "telegram:777" in text
    bob = await user_id(app, "telegram", "777")
    for token in ("telegram:777", str(bob), f"#{bob}"):
        shown = await say(app, f"/budget {token}", user="root")
        assert "of 5,700 tokens" in shown
