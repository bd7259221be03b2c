"""`/link` across two platforms: one-time codes, merging users (role, budget,
history, scheduled jobs), refusals."""

from __future__ import annotations

import re
from typing import Any

from sqlmodel import col, select

from bot.accounts.directory import Directory
from bot.accounts.linking import hash_code
from bot.store.models import AuditEntry, LinkCode, PlatformLink, TokenLog, User
from bot.types import Role
from tests.fakes.anthropic import FakeUsage, text_reply
from tests.harness import message
from tests.scheduling.rig import FakeClock, add_job, job, started

TELEGRAM = {"platform": "telegram", "platform_user_id": "4242", "platform_channel_id": "4242"}


async def command(app: Any, text: str, **fields: Any) -> str:
    outcome = await app.pipeline.handle(message(text, **fields))
    assert outcome.status == "command"
    return str(outcome.replies[0].text)


def code_of(text: str) -> str:
    found = re.search(r"`([A-Z2-9]{8})`", text)
    assert found, text
    return found[1]


async def test_link_two_platforms_into_one_user(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock, platform="telegram", budgets={"guest": 50_000})
    fake_anthropic.script(
        text_reply("a", usage=FakeUsage(input_tokens=300, output_tokens=0)),
        text_reply("b", usage=FakeUsage(input_tokens=200, output_tokens=0)),
    )
    await app.pipeline.handle(message("hi from the terminal"))  # console:alice
    await app.pipeline.handle(message("hi from telegram", **TELEGRAM))
    identity = app.pipeline.s.identity
    alice = await identity.resolve(message("-"))
    tele = await identity.resolve(message("-", **TELEGRAM))
    await Directory(app.store, identity).set_role(tele.id, Role.USER)
    wakeup = await add_job(app, "every 1h", **TELEGRAM)  # owned by the telegram user

    issued = await command(app, "/link")
    code = code_of(issued)
    assert "within 10 minutes" in issued.lower()
    async with app.store.read() as s:
        stored = (await s.exec(select(LinkCode))).one()
    assert stored.code_hash == hash_code(code) and code not in stored.code_hash  # hashed

    linked = await command(app, f"/link {code.lower()}", **TELEGRAM)
    assert linked.startswith("Linked: ") and "role user" in linked
    assert "console:alice" in linked and "telegram:4242" in linked

    # Both accounts are one user now: the one who asked for the code is kept.
    assert (await identity.resolve(message("-", **TELEGRAM))).id == alice.id
    async with app.store.read() as s:
        users = (await s.exec(select(User))).all()
        links = (await s.exec(select(PlatformLink).order_by(col(PlatformLink.id)))).all()
        logs = (await s.exec(select(TokenLog))).all()
    assert [u.id for u in users] == [alice.id] and users[0].role == "user"  # the higher role
    assert [(x.platform, x.user_id) for x in links] == [
        ("console", alice.id),
        ("telegram", alice.id),
    ]
    assert {log.user_id for log in logs} == {alice.id}  # usage history follows
    # One budget: both accounts' usage this month, against the merged role's allowance.
    assert "Used 500 of 200,000 tokens" in await command(app, "/budget", **TELEGRAM)
    assert "Used 500 of 200,000 tokens" in await command(app, "/budget")

    # The telegram wakeup is now alice's and still posts on telegram, charged to her.
    assert (await job(app, wakeup.id)).owner_user_id == alice.id
    clock.advance(hours=1)
    fake_anthropic.script(text_reply("tick", usage=FakeUsage(input_tokens=50, output_tokens=0)))
    assert await app.scheduler.run_due() == {wakeup.id: "answered"}
    assert "Used 550 of 200,000 tokens" in await command(app, "/budget")

    entries = [(e.actor, e.action, e.outcome) for e in await _audit(app)]
    assert entries == [("telegram:4242", "/link", "ok")]


async def test_codes_are_single_use_expire_and_resist_guessing(make_app, fake_anthropic):
    clock = FakeClock()
    app, _ = await started(make_app, clock)
    code = code_of(await command(app, "/link"))
    await command(app, f"/link {code}", **TELEGRAM)
    discord = {"platform": "discord", "platform_user_id": "9", "platform_channel_id": "9"}
    again = await command(app, f"/link {code}", **discord)
    assert again.startswith("That link code is wrong, expired or already used.")
    assert again.endswith("Usage: /link [code]")

    late = code_of(await command(app, "/link"))
    clock.advance(minutes=10, seconds=1)
    assert (await command(app, f"/link {late}", **discord)).startswith("That link code is wrong")

    same = code_of(await command(app, "/link"))
    assert (await command(app, f"/link {same}", **TELEGRAM)).startswith(
        "These accounts are already linked"
    )

    for _ in range(3):  # five failures in ten minutes lock /link CODE for that user
        await command(app, "/link AAAAAAAA", **discord)
    fresh = code_of(await command(app, "/link"))
    locked = await command(app, f"/link {fresh}", **discord)
    assert locked.startswith("Too many wrong link codes")
    failures = [e for e in await _audit(app) if e.outcome == "failed"]
    assert len(failures) == 7 and {e.actor for e in failures} == {"discord:9", "telegram:4242"}


async def test_the_higher_role_and_an_explicit_limit_survive(make_app, fake_anthropic):
    app, _ = await started(make_app, FakeClock(), admin={"owners": ["telegram:4242"]})
    await app.pipeline.handle(message("/help", **TELEGRAM))
    alice = await app.pipeline.s.identity.resolve(message("-"))
    await app.pipeline.s.budgets.set_limit(alice.id, "fixed", 123)
    code = code_of(await command(app, "/link", **TELEGRAM))  # the owner asks this time
    await command(app, f"/link {code}")
    merged = await app.pipeline.s.identity.resolve(message("-"))
    assert merged.role is Role.OWNER  # telegram:4242 is an owner, so the user is
    # The kept user (the owner) followed the role default; alice's explicit limit is adopted.
    assert "of 123 tokens" in await command(app, "/budget")


async def test_a_limit_adopted_by_linking_counts_for_the_next_message(make_app, fake_anthropic):
    # The kept user's budget was known unlimited (cached); the merge gives it the
    # other account's explicit limit, which the next message must see.
    app, _ = await started(make_app, FakeClock(), budgets={"guest": "unlimited"})
    assert (await app.pipeline.handle(message("hi", **TELEGRAM))).status == "answered"
    alice = await app.pipeline.s.identity.resolve(message("-"))
    await app.pipeline.s.budgets.set_limit(alice.id, "fixed", 1)
    code = code_of(await command(app, "/link", **TELEGRAM))
    await command(app, f"/link {code}")
    calls = fake_anthropic.request_count
    assert (await app.pipeline.handle(message("again", **TELEGRAM))).status == "refused"
    assert fake_anthropic.request_count == calls


async def _audit(app: Any) -> list[AuditEntry]:
    async with app.store.read() as s:
        return list((await s.exec(select(AuditEntry).order_by(col(AuditEntry.id)))).all())
