"""System prompt sections: plain functions, a fixed order, stable vs per-turn parts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.agent import prompt
from bot.agent.prompt import PromptContext, build_system, sections
from tests.probes import ProbeTool

NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)


def ctx(**fields: Any) -> PromptContext:
    values: dict[str, Any] = {
        "platform": "telegram",
        "chat_type": "direct",
        "persona_name": "Ada",
        "persona_prompt": "You are Ada, a terse engineer.",
        "model": "claude-sonnet-5-5",
        "conversation_key": "telegram:42:-",
        "user_name": "Bob",
        "user_role": "user",
        "tools": (ProbeTool("clock", description="Tell the time.\nMore detail."),),
        "now": NOW,
    }
    values.update(fields)
    return PromptContext(**values)


def test_full_mode_has_every_section_in_order():
    names = [name for name, _ in sections(ctx(memories=("#1 (2026-01-01): likes tea",)))]
    assert names == [
        "identity",
        "persona",
        "tooling",
        "safety",
        "formatting",
        "silent_replies",
        "wakeups",
        "persona_reminder",
        "conversation",
        "user_identity",
        "runtime",
        "current_time",
        "recalled_memories",
    ]


def test_minimal_mode_for_wakeups_and_internal_turns():
    names = [name for name, _ in sections(ctx(mode="minimal", source="scheduler"))]
    assert names == [
        "identity",
        "persona",
        "tooling",
        "safety",
        "silent_replies",
        "wakeups",
        "conversation",
        "user_identity",
        "runtime",
        "wakeup_turn",
        "current_time",
    ]


def test_sections_say_what_they_should():
    c = ctx()
    assert "chat platforms" in prompt.identity(c)
    assert prompt.conversation(c).startswith(
        "This conversation: a direct conversation on telegram."
    )
    assert "Telegram renders" in prompt.conversation(c)
    assert "a group chat on telegram" in prompt.conversation(ctx(chat_type="group"))
    assert prompt.conversation(ctx(platform="irc")).endswith("Answer in Markdown.")
    assert prompt.persona(c) == "You are Ada, a terse engineer."
    assert prompt.tooling(c) == "Use your tools when they help."
    assert prompt.tooling(ctx(tools=())) == ""
    assert "memory_save" in prompt.tooling(ctx(tools=(ProbeTool("memory_save"),)))
    assert "<document>" in prompt.safety(c) and "never reveal" in prompt.safety(c).lower()
    assert prompt.user_identity(c) == "You are talking with Bob (role: user)."
    assert "[their name]" in prompt.user_identity(ctx(chat_type="group"))
    assert "scheduled wakeup" in prompt.wakeup_turn(ctx(source="scheduler"))
    assert prompt.wakeup_turn(c) == ""
    assert prompt.current_time(c) == "Current time: 2026-03-04 05:06 UTC (Wednesday)."
    assert "Markdown" in prompt.formatting(c)
    assert "NO_REPLY" in prompt.silent_replies(c)
    assert "not meant for you" in prompt.silent_replies(c)
    assert "NO_REPLY" in prompt.wakeups(c)
    assert prompt.runtime(c) == "Runtime: model claude-sonnet-5-5; conversation telegram:42:-."
    assert prompt.persona_reminder(c).startswith("Remember: you are Ada")
    assert prompt.persona_reminder(ctx(persona_prompt="")) == ""
    assert prompt.recalled_memories(c) == ""
    assert prompt.speaker(c) == ""
    assert prompt.speaker(ctx(chat_type="group")) == "The latest message is from Bob (user)."


def test_the_system_prompt_is_stable_and_the_turn_context_is_separate():
    first = build_system(ctx(now=NOW, memories=("#3 (2026-01-01): prefers tea",)))
    later = build_system(ctx(now=datetime(2026, 3, 5, 9, 0, tzinfo=UTC)))
    assert first.blocks == later.blocks  # cacheable: nothing in it changes per turn
    assert len(first.blocks) == 2 and first.blocks[0].cache and not first.blocks[1].cache
    shared, local = (b.text for b in first.blocks)
    assert shared.index("Ada, a terse engineer") < shared.index("Remember:")
    assert local.index("This conversation:") < local.index("Bob") < local.index("Runtime:")
    for text in (shared, local):
        assert "Current time" not in text and "prefers tea" not in text
    assert first.volatile.startswith("<turn_context>\n") and first.volatile.endswith(
        "</turn_context>"
    )
    assert "Current time: 2026-03-04 05:06 UTC" in first.volatile
    assert "- #3 (2026-01-01): prefers tea" in first.volatile


def test_every_conversation_of_a_persona_shares_the_cached_block_byte_for_byte():
    """Different users, platforms, kinds of chat, conversations, times and
    memories: the block before the cache breakpoint is the same bytes; what
    differs is after it."""
    variants = [
        ctx(),
        ctx(user_name="Carol", user_role="admin", conversation_key="telegram:7:-"),
        ctx(platform="slack", chat_type="group", conversation_key="slack:C1:171.2"),
        ctx(platform="discord", now=datetime(2027, 1, 1, tzinfo=UTC), memories=("likes tea",)),
        ctx(source="scheduler"),
    ]
    built = [build_system(c) for c in variants]
    cached = {b.blocks[0].text.encode() for b in built}
    assert len(cached) == 1
    assert all(b.blocks[0].cache for b in built)
    assert len({b.blocks[1].text for b in built}) == 4  # the scheduler turn shares ctx()'s
    assert "Carol" in built[1].blocks[1].text and "Carol" not in built[1].blocks[0].text
    # Another persona has a prefix of its own.
    other = build_system(ctx(persona_name="Max", persona_prompt="You are Max."))
    assert other.blocks[0].text != built[0].blocks[0].text


def test_group_speaker_changes_only_the_turn_context():
    alice = build_system(ctx(chat_type="group", user_name="Alice"))
    bob = build_system(ctx(chat_type="group", user_name="Bob"))
    assert alice.blocks == bob.blocks
    assert "from Alice" in alice.volatile and "from Bob" in bob.volatile


def test_tool_descriptions_are_not_repeated_in_the_prompt():
    tools = (ProbeTool("alpha", description="Frobnicate widgets."), ProbeTool("beta"))
    built = build_system(ctx(tools=tools))
    text = "".join(b.text for b in built.blocks) + built.volatile
    assert "alpha" not in text and "Frobnicate" not in text and "beta" not in text
    assert "Use your tools" in text


def test_the_persona_block_is_built_once_per_persona_mode_and_tools():
    memory = (ProbeTool("memory_save"), ProbeTool("clock"))
    variants = [
        ctx(),
        ctx(tools=()),
        ctx(tools=memory),
        ctx(persona_prompt="You are Ada, now chatty."),  # an edited persona, same name
        ctx(persona_name="Ada2"),
        ctx(mode="minimal"),
    ]
    built = [build_system(c).blocks[0] for c in variants]
    assert len({b.text for b in built}) == len(variants)
    assert "Use your tools" not in built[1].text and "memory_save" in built[2].text
    assert "now chatty" in built[3].text and "Ada2" in built[4].text
    # Built again: the same block object; and what a fresh build would say.
    assert all(build_system(c).blocks[0] is b for c, b in zip(variants, built, strict=True))
    prompt._SHARED.clear()
    assert [build_system(c).blocks[0] for c in variants] == built
