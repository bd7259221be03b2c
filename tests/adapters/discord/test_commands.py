"""Slash commands: synced at start, deferred, answered by follow-up, our role check."""

from __future__ import annotations

from typing import Any

from tests.adapters.discord.helpers import failures, settle
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.discord import FakeDiscord, Posted
from tests.fakes.discord_payloads import (
    ALICE,
    BOB,
    BOT_ID,
    CHANNEL_ID,
)


async def test_commands_are_synced_at_start(start_discord, fake_discord: FakeDiscord):
    app, _ = await start_discord()
    names = [info.name for info in app.pipeline.command_infos()]
    assert [c["name"] for c in fake_discord.commands] == names
    assert all(c["default_member_permissions"] is None for c in fake_discord.commands)


async def test_commands_are_not_synced_when_disabled(start_discord, fake_discord: FakeDiscord):
    await start_discord(sync_commands=False)
    assert not fake_discord.requests("PUT", r"/applications/\d+/commands")


async def test_a_private_command_is_deferred_and_answered_ephemerally(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    payload = fake_discord.slash_command("budget")
    await fake_discord.dispatch("INTERACTION_CREATE", payload)
    answered = await _answered(fake_discord, payload)
    assert answered.ephemeral and "tokens this month" in answered.content
    calls = [c for c in fake_discord.calls if payload["token"] in c.path]
    assert calls[0].path.endswith("/callback")  # deferred before anything else
    assert calls[0].body == {"type": 5, "data": {"flags": 64}}
    assert fake_anthropic.request_count == 0


async def test_a_public_command_answer_is_posted_for_everyone(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    payload = fake_discord.slash_command("help")
    await fake_discord.dispatch("INTERACTION_CREATE", payload)
    [answer] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert not answer.ephemeral and answer.interaction_id == payload["id"]
    assert "/budget" in answer.content and not answer.pings
    original = fake_discord.interactions[payload["token"]].original
    assert original is not None and original.deleted  # the ephemeral "thinking…" is gone
    await settle(fake_discord, adapter)
    assert len(fake_discord.visible(CHANNEL_ID)) == 1
    assert fake_anthropic.request_count == 0


async def test_command_arguments_reach_the_command(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    fake_anthropic.script(text_reply("Noted."))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> x"))
    await fake_discord.wait_for_message(CHANNEL_ID)
    payload = fake_discord.slash_command("new", None)
    await fake_discord.dispatch("INTERACTION_CREATE", payload)
    [_, answer] = await fake_discord.wait_for_message(CHANNEL_ID, 2)
    assert "fresh conversation" in answer.content
    fake_anthropic.script(text_reply("Hello again."))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> y"))
    await fake_discord.wait_for_message(CHANNEL_ID, 3)
    assert len(fake_anthropic.last_request.messages) == 1  # /new forgot the history


async def test_the_role_check_is_ours(start_discord, fake_discord: FakeDiscord):
    owners = {"admin": {"owners": [f"discord:{BOB['id']}"]}}
    await start_discord(sections=owners)
    synced = {c["name"]: c for c in fake_discord.commands}
    assert synced["grant"]["default_member_permissions"] is None  # Discord shows it to all
    assert [o["name"] for o in synced["grant"]["options"]] == ["arguments"]

    denied = fake_discord.slash_command("grant", f"<@{BOB['id']}> 5000")  # Alice: a guest
    await fake_discord.dispatch("INTERACTION_CREATE", denied)
    refusal = await _answered(fake_discord, denied)
    assert refusal.ephemeral and "needs the admin role" in refusal.content

    allowed = fake_discord.slash_command("grant", f"<@{ALICE['id']}> 5000", user=BOB)
    await fake_discord.dispatch("INTERACTION_CREATE", allowed)
    [answer] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert answer.content.startswith("Granted 5,000 tokens to ")
    assert ALICE["id"] in answer.content or ALICE["username"] in answer.content


async def _answered(fake: FakeDiscord, payload: dict[str, Any]) -> Posted:
    """The deferred response once a follow-up has filled it."""
    interaction = fake.interactions[payload["token"]]

    def filled() -> Posted | None:
        original = interaction.original
        return original if original is not None and not original.loading else None

    return await fake.wait_until(filled)


async def test_a_follow_up_that_cannot_be_sent_is_recorded(
    start_discord, fake_discord: FakeDiscord
):
    app, adapter = await start_discord()
    payload = fake_discord.slash_command("budget")
    fake_discord.expire(payload)  # e.g. the 15 minutes of an interaction token are over
    await fake_discord.dispatch("INTERACTION_CREATE", payload)
    await fake_discord.wait_until(
        lambda: fake_discord.requests("POST", rf"/webhooks/\d+/{payload['token']}")
    )
    await adapter.idle()
    [failure] = await failures(app)
    assert failure.channel_id == CHANNEL_ID and "tokens this month" in failure.text
    assert failure.reason.startswith("DeliveryFailed: interaction follow-up failed")
    assert "Invalid Webhook Token" in failure.reason
