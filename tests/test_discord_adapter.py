"""The Discord adapter end to end: the real discord.py client against the fake Discord
(REST + gateway, tests/fakes/discord.py), the real App and pipeline (SQLite and
PostgreSQL), the real anthropic SDK against the fake Messages API.

Nothing here measures time: tests wait for events (a message appearing on the fake,
a gateway barrier, the adapter's in-flight tasks finishing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route
from sqlmodel import select

from adapters.discord import DiscordAdapter, create_adapter
from bot.app import App
from bot.commands import CommandCall, CommandSpec
from bot.config import DiscordSettings, Secrets
from bot.errors import ConfigError, StartupError
from bot.ports import CommandInfo
from bot.store.models import DeliveryFailure
from bot.types import IncomingMessage, Outcome, Reply, Role
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.discord import FakeDiscord, Posted
from tests.fakes.discord_payloads import (
    ALICE,
    BOB,
    BOT_ID,
    BOT_ROLE_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    MODS_ROLE_ID,
    OTHER_CHANNEL_ID,
    THREAD_ID,
    TOKEN,
)

ZWSP = "\u200b"
SECRETS = Secrets(discord_bot_token=TOKEN)  # type: ignore[arg-type]


@pytest.fixture
async def fake_discord():
    async with FakeDiscord() as fake:
        yield fake


@pytest.fixture
def start_discord(fake_discord: FakeDiscord, make_app):  # type: ignore[no-untyped-def]
    """Open an App wired to both fakes and start the Discord adapter through App.start."""

    async def start(
        *,
        commands: Sequence[CommandSpec] = (),
        sections: dict[str, Any] | None = None,
        **discord: Any,
    ) -> tuple[App, DiscordAdapter]:
        app = await make_app(
            server={"port": 0},
            discord={"enabled": True, "api_base_url": fake_discord.api_base_url, **discord},
            **(sections or {}),
        )
        for spec in commands:
            app.pipeline.s.commands.add(spec)
        adapter = create_adapter(app.settings, SECRETS)
        await app.start([adapter])
        await fake_discord.sync()  # READY and GUILD_CREATE (the bot's role) are processed
        return app, adapter

    return start


async def settle(fake: FakeDiscord, adapter: DiscordAdapter) -> None:
    """Every frame sent so far has been read by discord.py, and handled by the adapter."""
    await fake.sync()
    await adapter.idle()


async def failures(app: App) -> list[DeliveryFailure]:
    async with app.store.read() as session:
        return list((await session.exec(select(DeliveryFailure))).all())


# -- messages in, replies out ---------------------------------------------------------


async def test_a_mention_in_a_guild_gets_one_reply_to_the_author(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    fake_anthropic.script(text_reply("Hello **Alice**, nice to meet you."))
    message = fake_discord.user_message(f"<@{BOT_ID}> hello there")
    await fake_discord.dispatch("MESSAGE_CREATE", message)

    [reply] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert reply.content == "Hello **Alice**, nice to meet you."
    assert reply.reply_to == message["id"]
    assert reply.pings == {f"user:{ALICE['id']}"}  # only the author, through the reply
    assert fake_anthropic.last_request.messages[-1]["content"][0]["text"] == "[Alice] hello there"
    assert fake_discord.requests("POST", rf"/channels/{CHANNEL_ID}/typing")
    await settle(fake_discord, adapter)  # our own message came back: it is not answered
    assert len(fake_discord.visible(CHANNEL_ID)) == 1
    assert fake_anthropic.request_count == 1


async def test_guild_chatter_is_ignored_and_direct_messages_always_answered(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message("just chatting"))
    await settle(fake_discord, adapter)
    assert fake_discord.posted == [] and fake_anthropic.request_count == 0

    fake_anthropic.script(text_reply("Hi in private."))
    dm = fake_discord.user_message("hello", channel_id=DM_CHANNEL_ID, guild=False)
    await fake_discord.dispatch("MESSAGE_CREATE", dm)
    [reply] = await fake_discord.wait_for_message(DM_CHANNEL_ID)
    assert reply.content == "Hi in private." and reply.reply_to is None and not reply.pings


async def test_without_require_mention_guild_chatter_is_answered(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord(require_mention=False)
    fake_anthropic.script(text_reply("I heard that."))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message("just chatting"))
    [reply] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert reply.content == "I heard that."


async def test_replies_and_role_mentions_address_the_bot(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    fake_anthropic.script(text_reply("First."), text_reply("Second."), text_reply("Third."))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> one"))
    [first] = await fake_discord.wait_for_message(CHANNEL_ID)

    reply = fake_discord.user_message("two", reply_to=first, author=BOB)
    await fake_discord.dispatch("MESSAGE_CREATE", reply)
    second = (await fake_discord.wait_for_message(CHANNEL_ID, 2))[1]
    assert second.content == "Second." and second.reply_to == reply["id"]

    by_role = fake_discord.user_message(f"<@&{BOT_ROLE_ID}> three")
    await fake_discord.dispatch("MESSAGE_CREATE", by_role)
    third = (await fake_discord.wait_for_message(CHANNEL_ID, 3))[2]
    assert third.content == "Third." and third.reply_to == by_role["id"]
    assert fake_anthropic.last_request.messages[-1]["content"][0]["text"] == "[Alice] three"


async def test_a_thread_is_its_own_conversation_and_gets_the_reply(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    fake_anthropic.script(text_reply("In the channel."), text_reply("In the thread."))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> a"))
    await fake_discord.wait_for_message(CHANNEL_ID)
    in_thread = fake_discord.user_message(f"<@{BOT_ID}> b", channel_id=THREAD_ID)
    await fake_discord.dispatch("MESSAGE_CREATE", in_thread)

    [reply] = await fake_discord.wait_for_message(THREAD_ID)
    assert reply.content == "In the thread." and reply.reply_to == in_thread["id"]
    assert len(fake_discord.visible(CHANNEL_ID)) == 1
    sent = fake_anthropic.last_request.messages
    assert len(sent) == 1  # no history from the parent channel


async def test_a_duplicate_delivery_gets_one_reply(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    message = fake_discord.user_message(f"<@{BOT_ID}> once please")
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.wait_for_message(CHANNEL_ID)
    await settle(fake_discord, adapter)
    assert len(fake_discord.visible(CHANNEL_ID)) == 1
    assert fake_anthropic.request_count == 1


async def test_one_reply_per_message_across_a_restart(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, first = await start_discord()
    message = fake_discord.user_message(f"<@{BOT_ID}> remember me")
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.wait_for_message(CHANNEL_ID)
    await first.stop()

    _, second = await start_discord()  # a new process on the same database
    await fake_discord.dispatch("MESSAGE_CREATE", message)  # Discord delivers it again
    await settle(fake_discord, second)
    assert len(fake_discord.visible(CHANNEL_ID)) == 1
    assert fake_anthropic.request_count == 1


async def test_a_long_reply_is_split_with_balanced_fences(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    code = "\n".join(f"print('line {i:03}')" for i in range(150))
    text = "Here is the script:\n\n```python\n" + code + "\n```\n\n" + "That's all. " * 150
    fake_anthropic.script(text_reply(text))
    message = fake_discord.user_message(f"<@{BOT_ID}> write code")
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.wait_for_message(CHANNEL_ID, 3)
    await settle(fake_discord, adapter)

    parts = fake_discord.visible(CHANNEL_ID)
    assert len(parts) >= 3
    assert all(0 < len(p.content) <= 2000 for p in parts)  # the fake also rejects more
    assert all(p.content.count("```") % 2 == 0 for p in parts)
    assert [p.reply_to for p in parts] == [message["id"]] + [None] * (len(parts) - 1)
    assert all(p.pings == set() for p in parts[1:])
    joined = "".join(p.content for p in parts)
    assert all(f"print('line {i:03}')" in joined for i in range(150))


async def test_mentions_from_the_model_never_ping(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    fake_anthropic.script(
        text_reply(f"@everyone and @here, ask <@&{MODS_ROLE_ID}> or <@{BOB['id']}>. `@everyone`")
    )
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> who?"))
    [reply] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert reply.pings == {f"user:{ALICE['id']}"}  # the author only, by the reply
    assert reply.allowed_mentions == {"parse": [], "replied_user": True}
    assert f"@{ZWSP}everyone" in reply.content and f"@{ZWSP}here" in reply.content
    assert f"<@{ZWSP}&{MODS_ROLE_ID}>" in reply.content


async def test_no_reply_sends_nothing(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord()
    fake_anthropic.script(text_reply("NO_REPLY"))
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> ok"))
    await settle(fake_discord, adapter)
    assert fake_anthropic.request_count == 1
    assert fake_discord.posted == []


async def test_attachments_are_downloaded_for_the_model(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    await start_discord()
    notes = fake_discord.add_file("notes.txt", b"the launch code is 42", "text/plain")
    message = fake_discord.user_message(
        "what is in this file?", channel_id=DM_CHANNEL_ID, guild=False, attachments=[notes]
    )
    fake_anthropic.script(text_reply("It says 42."))
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    await fake_discord.wait_for_message(DM_CHANNEL_ID)
    blocks = fake_anthropic.last_request.messages[-1]["content"]
    assert any("the launch code is 42" in b.get("text", "") for b in blocks)


async def test_a_too_large_attachment_is_refused_without_an_llm_call(
    start_discord, fake_discord: FakeDiscord, fake_anthropic: FakeAnthropic
):
    _, adapter = await start_discord(max_file_bytes=10)
    big = fake_discord.add_file("big.txt", b"x" * 100, "text/plain")
    message = fake_discord.user_message(
        "", channel_id=DM_CHANNEL_ID, guild=False, attachments=[big]
    )
    await fake_discord.dispatch("MESSAGE_CREATE", message)
    [notice] = await fake_discord.wait_for_message(DM_CHANNEL_ID)
    assert "big.txt" in notice.content and "too large" in notice.content
    await settle(fake_discord, adapter)
    assert fake_anthropic.request_count == 0
    assert not fake_discord.requests("GET", r"/attachments/.*")  # never downloaded


# -- rate limits and failures -------------------------------------------------------


async def test_a_long_rate_limit_on_one_channel_does_not_hold_up_another(
    start_discord, fake_discord: FakeDiscord
):
    await start_discord()  # the fake Anthropic echoes: "echo: <text>"
    fake_discord.rate_limit(CHANNEL_ID, retry_after=45.0)  # below max_ratelimit_wait: retried
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> a"))
    await fake_discord.wait_until(lambda: fake_discord.rate_limited)

    other = fake_discord.user_message(f"<@{BOT_ID}> b", channel_id=OTHER_CHANNEL_ID)
    await fake_discord.dispatch("MESSAGE_CREATE", other)
    [reply] = await fake_discord.wait_for_message(OTHER_CHANNEL_ID)
    assert reply.content == r"echo: \[Alice\] b"  # brackets escaped by the renderer
    assert fake_discord.visible(CHANNEL_ID) == []  # channel A is still waiting its turn


async def test_a_rate_limit_longer_than_the_maximum_is_recorded_as_a_failure(
    start_discord, fake_discord: FakeDiscord
):
    app, adapter = await start_discord()
    fake_discord.rate_limit(CHANNEL_ID, retry_after=3600.0)
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> hi"))
    await fake_discord.wait_until(lambda: fake_discord.rate_limited)
    await settle(fake_discord, adapter)
    [failure] = await failures(app)
    assert failure.platform == "discord" and failure.channel_id == CHANNEL_ID
    assert "rate limited for 3600s" in failure.reason and failure.text == "echo: [Alice] hi"
    assert fake_discord.visible(CHANNEL_ID) == []


async def test_a_refused_send_is_recorded(start_discord, fake_discord: FakeDiscord):
    app, adapter = await start_discord()
    fake_discord.fail(CHANNEL_ID)  # 403 Missing Permissions
    await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message(f"<@{BOT_ID}> hi"))
    await settle(fake_discord, adapter)
    [failure] = await failures(app)
    assert failure.reason.startswith("DeliveryFailed: Discord did not take the message")
    assert "Forbidden" in failure.reason and "50013" in failure.reason


# -- slash commands -----------------------------------------------------------------


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
    ran: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    async def grant(call: CommandCall) -> str:
        ran.append((call.args, call.msg.mentioned_user_ids))
        return "Granted."

    spec = CommandSpec("grant", "Give tokens", grant, usage="@user amount", min_role=Role.ADMIN)
    owners = {"admin": {"owners": [f"discord:{BOB['id']}"]}}
    await start_discord(commands=[spec], sections=owners)
    synced = {c["name"]: c for c in fake_discord.commands}
    assert synced["grant"]["default_member_permissions"] is None  # Discord shows it to all
    assert [o["name"] for o in synced["grant"]["options"]] == ["arguments"]

    denied = fake_discord.slash_command("grant", f"<@{BOB['id']}> 5000")  # Alice: a guest
    await fake_discord.dispatch("INTERACTION_CREATE", denied)
    refusal = await _answered(fake_discord, denied)
    assert refusal.ephemeral and "needs the admin role" in refusal.content
    assert ran == []

    allowed = fake_discord.slash_command("grant", f"<@{ALICE['id']}> 5000", user=BOB)
    await fake_discord.dispatch("INTERACTION_CREATE", allowed)
    [answer] = await fake_discord.wait_for_message(CHANNEL_ID)
    assert answer.content == "Granted." and not answer.ephemeral
    assert ran == [((f"<@{ALICE['id']}>", "5000"), (ALICE["id"],))]


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


# -- startup, configuration ----------------------------------------------------------


async def test_rest_and_gateway_point_at_the_configured_server(
    start_discord, fake_discord: FakeDiscord
):
    default_rest, default_gateway = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    _, adapter = await start_discord()
    assert fake_discord.api_base_url == Route.BASE
    assert str(DiscordWebSocket.DEFAULT_GATEWAY) == fake_discord.gateway_url
    assert adapter.identity.user_id == BOT_ID
    [identify] = fake_discord.identified
    assert identify["intents"] == 1 | 1 << 9 | 1 << 12 | 1 << 15  # guilds, messages, DMs, content
    await adapter.stop()
    assert (default_rest, default_gateway) == (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)


def test_a_missing_token_is_a_one_line_config_error(make_settings_for_discord):
    with pytest.raises(ConfigError) as caught:
        create_adapter(make_settings_for_discord, Secrets())
    assert str(caught.value) == "DISCORD_BOT_TOKEN is not set (secrets come only from env vars)"


@pytest.fixture
def make_settings_for_discord():  # type: ignore[no-untyped-def]
    from bot.config import Settings

    return Settings.model_validate({"discord": {"enabled": True}})


async def test_a_rejected_token_stops_startup(make_app):
    default_rest = Route.BASE
    async with FakeDiscord(token="another-token") as fake:
        app = await make_app(discord={"enabled": True, "api_base_url": fake.api_base_url})
        adapter = create_adapter(app.settings, SECRETS)
        with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN was rejected"):
            await adapter.start(app.pipeline)
    assert default_rest == Route.BASE


async def test_a_missing_message_content_intent_is_explained(make_app):
    async with FakeDiscord(message_content_enabled=False) as fake:
        app = await make_app(discord={"enabled": True, "api_base_url": fake.api_base_url})
        adapter = create_adapter(app.settings, SECRETS)
        with pytest.raises(ConfigError, match=r"Message Content intent.*developer portal"):
            await adapter.start(app.pipeline)


async def test_an_unreachable_discord_is_a_startup_error(make_app):
    async with FakeDiscord() as fake:
        api_base_url = fake.api_base_url
    app = await make_app(discord={"enabled": True, "api_base_url": api_base_url})
    with pytest.raises(StartupError, match=r"cannot log in to Discord at http://127\.0\.0\.1"):
        await create_adapter(app.settings, SECRETS).start(app.pipeline)


class StubCore:
    """Records what the adapter hands over; answers nothing."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []

    async def handle(self, msg: IncomingMessage, *, deliver: bool = True) -> Outcome:
        self.messages.append(msg)
        return Outcome("ignored")

    def command_infos(self) -> list[CommandInfo]:
        return []

    async def record_delivery_failure(self, reply: Reply, error: BaseException) -> None:
        raise AssertionError("nothing is sent here")


async def test_a_new_session_reconnects_to_the_configured_gateway(fake_discord: FakeDiscord):
    """discord.py opens every non-resumed session on DiscordWebSocket.DEFAULT_GATEWAY:
    after an INVALID_SESSION the adapter must land on the configured server again.
    (discord.py waits 5 s before re-identifying; no assertion depends on it.)"""
    settings = DiscordSettings(enabled=True, api_base_url=fake_discord.api_base_url)
    adapter, core = DiscordAdapter(settings, TOKEN), StubCore()
    await adapter.start(core)
    try:
        await fake_discord.gateway.invalidate_sessions()
        await fake_discord.wait_until(
            lambda: (
                len(fake_discord.identified) == 2
                and any(s.identified for s in fake_discord.gateway.sessions)
            )
        )
        await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.user_message("after"))
        await settle(fake_discord, adapter)
        assert [m.text for m in core.messages] == ["after"]
    finally:
        await adapter.stop()
