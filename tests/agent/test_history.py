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


# --- the three-stage pipeline -------------------------------------------------


def turn_rows(n: int, *, tools: bool = False, result: str = "r") -> list[HistoryRow]:
    rows: list[HistoryRow] = []
    for i in range(n):
        rows.append(HistoryRow("user", f"question {i}", id=len(rows) + 1))
        if tools:
            rows.append(HistoryRow("tool_call", "", f"t{i}", "a", {}, id=len(rows) + 1))
            rows.append(HistoryRow("tool_result", result, f"t{i}", id=len(rows) + 1))
        rows.append(HistoryRow("assistant", f"answer {i}", id=len(rows) + 1))
    return rows


def first_question(rows: list[HistoryRow]) -> str:
    return next(r.text for r in rows if r.role == "user")


def test_recent_turns_are_kept_and_dropped_in_steps():
    from bot.agent.history import keep_recent_turns

    starts = [first_question(keep_recent_turns(turn_rows(n), 4, 3)) for n in range(1, 12)]
    # At least four turns; the start moves three turns at a time.
    assert starts == [
        "question 0",
        "question 0",
        "question 0",
        "question 0",
        "question 0",
        "question 0",
        "question 3",
        "question 3",
        "question 3",
        "question 6",
        "question 6",
    ]
    assert first_question(keep_recent_turns(turn_rows(10), 4, 1)) == "question 6"


def test_pruning_soft_trims_then_clears_old_results_only():
    from bot.agent.history import (
        CLEARED_RESULT,
        SOFT_TRIM_KEEP,
        group_rows,
        prune_tool_results,
    )
    from bot.llm.tokens import messages_tokens

    big = "".join(f"{i:05d}" for i in range(2000))  # 10,000 characters
    messages = group_rows(turn_rows(8, tools=True, result=big))
    results = lambda ms: [  # noqa: E731
        b.content for m in ms for b in m.content if isinstance(b, ToolResultBlock)
    ]
    full = messages_tokens(messages)

    # A budget a little under the total: one soft trim is enough, the oldest.
    trimmed = prune_tool_results(messages, full - 500)
    contents = results(trimmed)
    assert contents[0].startswith(big[:SOFT_TRIM_KEEP]) and contents[0].endswith(
        big[-SOFT_TRIM_KEEP:]
    )
    assert "characters trimmed" in contents[0]
    assert contents[1:] == [big] * 7

    # A tight budget: everything old is trimmed, then cleared, oldest first;
    # nothing from the third-to-last assistant message on is touched (here: the
    # last turn's tool call, its result and its answer).
    pruned = prune_tool_results(messages, 1)
    contents = results(pruned)
    assert contents[:7] == [CLEARED_RESULT] * 7
    assert contents[7:] == [big]
    assert pruned[0] == messages[0]  # the first user message is protected
    assert valid(repair(pruned))


def test_build_history_puts_the_summary_first():
    from bot.agent.history import SUMMARY_ACK, SUMMARY_HEADER, HistoryPolicy, build_history

    rows = [HistoryRow("tool_result", "orphan", "t0"), *turn_rows(2)]
    messages = build_history(rows, "- Bob likes tea", HistoryPolicy(turns=10))
    assert messages[0].text == f"{SUMMARY_HEADER}\n- Bob likes tea"
    assert messages[1].text == SUMMARY_ACK
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert valid(messages)
    assert build_history(rows, None, HistoryPolicy())[0].text == "question 0"


def test_the_same_rows_again_give_the_same_messages_and_changed_rows_their_own():
    from bot.agent.history import HistoryPolicy, Viewer, build_history

    rows = [
        HistoryRow("user", "hi", id=1, user_id=7),
        HistoryRow("assistant", "let me look", id=2),
        HistoryRow("tool_call", "", "t1", "a", {"q": 1}, id=3),
        HistoryRow("tool_result", "r1", "t1", id=4),
        HistoryRow("assistant", "done", id=5),
        HistoryRow("user", "and you, Bob?", id=6, user_id=8),
        HistoryRow("assistant", "x" * 5000, id=7),  # long: not remembered
    ]
    policy = HistoryPolicy(budget_tokens=100_000)
    first = build_history(rows, None, policy, Viewer(7))
    again = build_history(list(rows), None, policy, Viewer(7))
    assert again == first
    # A row met before gives the same message object (its token estimate is known).
    assert again[0] is first[0]
    # The same values in another row object: an equal message, built afresh.
    copied = [HistoryRow(*row) for row in rows]
    fresh = build_history(copied, None, policy, Viewer(7))
    assert fresh == first and fresh[0] is not first[0]
    # Rows changed since (another row object) are never answered from what was kept.
    edited = [rows[0]._replace(text="hello"), *rows[1:]]
    assert build_history(edited, None, policy, Viewer(7))[0].content == (TextBlock("hello"),)
    # Bob's message is marked as someone else's for Alice (viewer 7); for Bob it is his own.
    for_bob = build_history(rows, None, policy, Viewer(8))
    assert for_bob[-2].content[-1] == TextBlock("and you, Bob?")
    assert build_history(rows, None, policy, Viewer(7))[-2].content[-1] != TextBlock(
        "and you, Bob?"
    )


def test_the_fake_refuses_tool_blocks_without_tools_as_the_api_does():
    """The fake's rule the agent loop relies on (a role change keeps the tools
    defined): a history with tool calls needs tool definitions."""
    messages = to_chat_messages(
        [
            HistoryRow("user", "hi"),
            HistoryRow("tool_call", "", "t1", "a", {}),
            HistoryRow("tool_result", "r1", "t1"),
            HistoryRow("assistant", "done"),
        ]
    )
    body = api_body(messages)
    assert validate_request(body) is None
    assert "must define tools" in (validate_request({**body, "tools": []}) or "")
