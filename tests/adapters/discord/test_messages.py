"""Messages in, replies out; rate limits and delivery failures."""

from __future__ import annotations

from tests.adapters.discord.helpers import failures, settle
from tests.fakes.anthropic import FakeAnthropic, text_reply
from tests.fakes.discord import FakeDiscord
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
)

ZWSP = "\u200b"


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
