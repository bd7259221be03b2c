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
        "user_identity",
        "current_time",
        "recalled_memories",
        "formatting",
        "silent_replies",
        "wakeups",
        "runtime",
        "persona_reminder",
    ]


def test_minimal_mode_for_wakeups_and_internal_turns():
    names = [name for name, _ in sections(ctx(mode="minimal", source="scheduler"))]
    assert names == [
        "identity",
        "persona",
        "tooling",
        "safety",
        "user_identity",
        "current_time",
        "silent_replies",
        "wakeups",
        "runtime",
    ]


def test_sections_say_what_they_should():
    c = ctx()
    assert prompt.identity(c) == (
        "You are an AI assistant talking with people on telegram, in a direct conversation."
    )
    assert "a group chat" in prompt.identity(ctx(chat_type="group"))
    assert prompt.persona(c) == "You are Ada, a terse engineer."
    assert prompt.tooling(c) == "You can use these tools when they help:\n- clock: Tell the time."
    assert prompt.tooling(ctx(tools=())) == ""
    assert "memory_save" in prompt.tooling(ctx(tools=(ProbeTool("memory_save"),)))
    assert "<document>" in prompt.safety(c) and "never reveal" in prompt.safety(c).lower()
    assert prompt.user_identity(c) == "You are talking with Bob (role: user)."
    assert "[their name]" in prompt.user_identity(ctx(chat_type="group"))
    assert "scheduled wakeup" in prompt.user_identity(ctx(source="scheduler"))
    assert prompt.current_time(c) == "Current time: 2026-03-04 05:06 UTC (Wednesday)."
    assert "Telegram renders" in prompt.formatting(c)
    assert (
        prompt.formatting(ctx(platform="irc")) == "Write replies in Markdown. Answer in Markdown."
    )
    assert "NO_REPLY" in prompt.silent_replies(c)
    assert "not meant for you" in prompt.silent_replies(ctx(chat_type="group"))
    assert "NO_REPLY" in prompt.wakeups(ctx(source="scheduler"))
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
    assert len(first.blocks) == 1 and first.blocks[0].cache
    text = first.blocks[0].text
    assert text.index("Ada, a terse engineer") < text.index("Runtime:") < text.index("Remember:")
    assert "Current time" not in text and "prefers tea" not in text
    assert first.volatile.startswith("<turn_context>\n") and first.volatile.endswith(
        "</turn_context>"
    )
    assert "Current time: 2026-03-04 05:06 UTC" in first.volatile
    assert "- #3 (2026-01-01): prefers tea" in first.volatile


def test_group_speaker_changes_only_the_turn_context():
    alice = build_system(ctx(chat_type="group", user_name="Alice"))
    bob = build_system(ctx(chat_type="group", user_name="Bob"))
    assert alice.blocks == bob.blocks
    assert "from Alice" in alice.volatile and "from Bob" in bob.volatile


def test_only_the_tools_given_are_listed():
    text = build_system(ctx(tools=(ProbeTool("a"), ProbeTool("b")))).blocks[0].text
    assert "- a: A test tool." in text and "- b: A test tool." in text
    assert "- clock" not in text
