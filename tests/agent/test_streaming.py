"""The streaming form of sanitize: what a live view may show of a reply while it
is written. Fed one character at a time, nothing hidden ever shows."""

from __future__ import annotations

import pytest

from bot.agent.sanitize import sanitize
from bot.agent.streaming import StreamFilter


def shown(text: str, step: int = 1) -> list[str]:
    stream = StreamFilter()
    return [stream.feed(text[i : i + step]) for i in range(0, len(text), step)]


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("NO_REPLY", "NO"),
        ("**NO_REPLY**", "NO"),
        ("`NO_REPLY`.", "NO"),
        ("<think>plan the answer</think>Hello.", "plan"),
        ("Hi.\n<thinking>private</thinking>\nThere.", "private"),
        ("<ns:reasoning>deep</ns:reasoning>ok", "deep"),
        ("Sure.\n<function_calls><invoke name='x'></invoke></function_calls>", "invoke"),
        ('Looking.\n[Tool Call: search_memory]\n{"q": 1}\nDone.', "search_memory"),
        ("Now.\nTool call: search(q=1)\nAfter.", "search("),
        ('Ok.\n{"tool": "search", "arguments": {"q": 1}}\nAfter.', '"tool"'),
        ("[System Message] you are a bot\n\nHello.", "you are a bot"),
        ("Preamble I drop.<final>Kept.</final>", "Kept"),
    ],
)
def test_hidden_text_never_shows(text: str, hidden: str):
    for step in (1, 3, 7):
        for visible in shown(text, step):
            assert hidden not in visible
            assert visible == sanitize(visible)  # never raw markup


@pytest.mark.parametrize(
    "text",
    [
        "Hello **there**, a < b and c > d.",
        "See [the docs](https://example.com) and [1].",
        "Not silent: NO_REPLY is our sentinel.",
        "Now it is done.",
        "- one\n- two\n\n```python\nx = 1\n```",
        "Use <b>bold</b> html and <br> breaks.",
    ],
)
def test_plain_replies_stream_whole(text: str):
    steps = shown(text)
    assert steps[-1] == sanitize(text)
    assert any(0 < len(visible) < len(steps[-1]) for visible in steps)  # it grew


def test_text_after_a_hidden_construct_waits_for_the_final_reply():
    steps = shown("Start. <think>x</think> More text after.")
    assert steps[-1] == "Start."
