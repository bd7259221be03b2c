"""Stored rows → a message list the Messages API accepts, whatever was cut."""

from __future__ import annotations

from bot.agent.history import MISSING_RESULT, HistoryRow, repair, to_chat_messages
from bot.llm.types import ChatMessage, TextBlock, ToolResultBlock, ToolUseBlock
from tests.fakes.anthropic import validate_request

from bot.llm.anthropic import build_params  # isort: skip
from bot.llm.types import LLMRequest


def api_body(messages: list[ChatMessage]) -> dict:  # type: ignore[type-arg]
    params = build_params(LLMRequest(model="m", messages=(*messages,), cache=False))
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": params.messages,
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in ("a", "b")],
    }


def valid(messages: list[ChatMessage]) -> bool:
    return validate_request(api_body(messages)) is None


def test_rows_group_into_alternating_messages():
    rows = [
        HistoryRow("user", "hi"),
        HistoryRow("assistant", "let me look"),
        HistoryRow("tool_call", "", "t1", "a", {"q": 1}),
        HistoryRow("tool_call", "", "t2", "b", {}),
        HistoryRow("tool_result", "r1", "t1"),
        HistoryRow("tool_result", "r2", "t2", is_error=True),
        HistoryRow("assistant", "done"),
    ]
    messages = to_chat_messages(rows)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1].content == (
        TextBlock("let me look"),
        ToolUseBlock("t1", "a", {"q": 1}),
        ToolUseBlock("t2", "b", {}),
    )
    assert messages[2].content == (ToolResultBlock("t1", "r1"), ToolResultBlock("t2", "r2", True))
    assert valid(messages)


def test_missing_results_are_synthesized():
    messages = to_chat_messages(
        [
            HistoryRow("user", "hi"),
            HistoryRow("tool_call", "", "t1", "a", {}),
            HistoryRow("tool_call", "", "t2", "b", {}),
            HistoryRow("tool_result", "r1", "t1"),
            HistoryRow("user", "hello again"),
        ]
    )
    results = messages[2].content
    assert results[0] == ToolResultBlock("t1", "r1")
    assert results[1] == ToolResultBlock("t2", MISSING_RESULT, True)
    assert results[2] == TextBlock("hello again")
    assert valid(messages)


def test_orphaned_results_and_leading_assistant_turns_are_dropped():
    messages = to_chat_messages(
        [
            HistoryRow("tool_result", "stale", "t0"),
            HistoryRow("assistant", "answer to something cut off"),
            HistoryRow("user", "new question"),
            HistoryRow("tool_result", "orphan", "t9"),
            HistoryRow("assistant", "ok"),
        ]
    )
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == (TextBlock("new question"),)
    assert valid(messages)


def test_trailing_tool_calls_get_results():
    messages = repair(
        [
            ChatMessage("user", (TextBlock("q"),)),
            ChatMessage("assistant", (ToolUseBlock("t1", "a", {}),)),
        ]
    )
    assert messages[-1] == ChatMessage("user", (ToolResultBlock("t1", MISSING_RESULT, True),))


def test_consecutive_same_role_messages_are_merged():
    messages = repair(
        [
            ChatMessage("user", (TextBlock("one"),)),
            ChatMessage("user", (TextBlock("two"),)),
            ChatMessage("assistant", (TextBlock("a"),)),
            ChatMessage("assistant", (TextBlock("b"),)),
        ]
    )
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].text == "onetwo" and messages[1].text == "ab"


def test_assistant_tool_calls_followed_by_another_assistant_turn():
    messages = repair(
        [
            ChatMessage("user", (TextBlock("q"),)),
            ChatMessage("assistant", (ToolUseBlock("t1", "a", {}),)),
            ChatMessage("assistant", (TextBlock("later"),)),
        ]
    )
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert valid(messages)
