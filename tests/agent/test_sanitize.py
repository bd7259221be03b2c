"""Table-driven tests for bot.agent.sanitize."""

from __future__ import annotations

import random
import time

import pytest

from bot.agent.sanitize import SILENT_TOKEN, is_silent, sanitize

Case = tuple[str, str, str]  # (id, input, expected)

TOOL_XML: list[Case] = [
    (
        "function_calls block on its own lines",
        'Checking.\n<function_calls>\n<invoke name="web_search">\n'
        '<parameter name="q">weather</parameter>\n</invoke>\n</function_calls>\nDone.',
        "Checking.\nDone.",
    ),
    ("invoke inline", 'a <invoke name="x">payload</invoke> b', "a  b"),
    ("parameter element", 'x<parameter name="q">secret</parameter>y', "xy"),
    ("tool_use element", "<tool_use>{}</tool_use>Hi", "Hi"),
    ("tool_call element", "Hi\n<tool_call>\n{}\n</tool_call>", "Hi"),
    ("tool_result element", "<tool_result>raw output</tool_result>\nSummary", "Summary"),
    (
        "namespaced invoke",
        'A\n<ns:invoke name="f">\n<ns:parameter name="a">1</ns:parameter>\n</ns:invoke>\nB',
        "A\nB",
    ),
    ("dangling closing tag", "Answer.\n</function_calls>", "Answer."),
    ("dangling namespaced closing tag", "Answer </ns:function_calls> end", "Answer  end"),
    ("dangling opening tag alone", "<function_calls>\nHello", "Hello"),
    ("self-closing tag", 'Hi <invoke name="x"/> there', "Hi  there"),
    ("case-insensitive", "<TOOL_CALL>x</Tool_Call>ok", "ok"),
    ("lookalike tag kept", "<invoker>stays</invoker>", "<invoker>stays</invoker>"),
    ("function_call element", '<function_call>{"name": "f"}</function_call>\nOk', "Ok"),
    (
        "vendor-prefixed tool_call",
        'Sure.\n<minimax:tool_call>\n<invoke name="s">\n</invoke>\n</minimax:tool_call>',
        "Sure.",
    ),
    (
        "a reply of nothing but tool XML is empty",
        '<function_calls>\n<invoke name="x">\n<parameter name="a">1</parameter>\n'
        "</invoke>\n</function_calls>",
        "",
    ),
]

TEXT_CALLS: list[Case] = [
    ("bracket tool call", '[Tool call: web_search({"q": "x"})]\nIt is sunny.', "It is sunny."),
    (
        "called tool",
        'Sure.\n[Called tool get_weather with {"city": "Paris"}]\nSunny.',
        "Sure.\nSunny.",
    ),
    ("plain tool call line", 'Tool call: get_weather(city="Paris")\nSunny.', "Sunny."),
    ("json tool+arguments", '{"tool": "search", "arguments": {"q": 1}}\nok', "ok"),
    ("json tool+args", 'ok\n  {"tool": "search", "args": {}}', "ok"),
    ("json tool+input", 'a\n{"tool": "s", "input": {"q": "x"}}\nb', "a\nb"),
    ("json name+arguments", '{"name": "f", "arguments": {"x": [1, 2]}}\nok', "ok"),
    (
        "json extra key kept",
        '{"tool": "s", "arguments": {}, "x": 1}',
        '{"tool": "s", "arguments": {}, "x": 1}',
    ),
    (
        "json args not object kept",
        '{"tool": "s", "arguments": "q"}',
        '{"tool": "s", "arguments": "q"}',
    ),
    ("json name+other kept", '{"name": "Ann", "age": 3}', '{"name": "Ann", "age": 3}'),
    ("invalid json kept", '{"tool": "s", "arguments": {}', '{"tool": "s", "arguments": {}'),
    (
        "json mid-line kept",
        'Send {"tool": "s", "args": {}} to it',
        'Send {"tool": "s", "args": {}} to it',
    ),
    (
        "prose about tools kept",
        "I made a tool call: search(x) earlier.",
        "I made a tool call: search(x) earlier.",
    ),
    ("bracket mid-line kept", "See [Tool call: f()] above", "See [Tool call: f()] above"),
    (
        "tool call marker with its JSON arguments below",
        '[Tool Call: web_search]\n{\n  "query": "weather",\n  "n": [1, 2]\n}\nSunny.',
        "Sunny.",
    ),
    (
        "tool result marker with multi-line JSON output",
        'Checked.\n[Tool Result for web_search]\n{"results": [\n  {"t": "a"}\n]}\nSunny.',
        "Checked.\nSunny.",
    ),
    (
        "tool result with plain output up to the blank line",
        "[Tool Result: get_time]\n09:00 UTC\nMonday\n\nIt is nine.",
        "It is nine.",
    ),
    (
        "historical context marker and its JSON",
        '[Historical context: earlier tool output]\n["a", "b"]\nHello again.',
        "Hello again.",
    ),
    (
        "marker followed by JSON that never closes keeps the text",
        '[Tool Call: f]\n{"a": 1,\nstill here',
        '{"a": 1,\nstill here',
    ),
    (
        "marker inside a fenced code block kept",
        "Like this:\n```\n[Tool Result: x]\n{}\n```",
        "Like this:\n```\n[Tool Result: x]\n{}\n```",
    ),
    (
        "historical context mid-line kept",
        "See [Historical context: x] above",
        "See [Historical context: x] above",
    ),
]

THINKING: list[Case] = [
    ("thinking block", "<thinking>\nplan\n</thinking>\nAnswer", "Answer"),
    ("think inline", "Hello <think>hmm</think>world", "Hello world"),
    ("reasoning", "<reasoning>why</reasoning>Because.", "Because."),
    ("thought", "<thought>\nhmm\n</thought>\nYes.", "Yes."),
    ("antThinking", "<antThinking>plan</antThinking>Hello", "Hello"),
    ("antThinking any case", "<ANTTHINKING>x</antthinking>Hi", "Hi"),
    ("unclosed thought at the end", "Answer.\n<thought>and then", "Answer."),
    ("non-greedy: two blocks keep the text between", "<think>a</think>B<think>c</think>D", "BD"),
    ("reflection", "Done.\n<reflection>\nok\n</reflection>", "Done."),
    ("case-insensitive", "<THINK>x</think>Yes", "Yes"),
    ("attributes", '<thinking type="deep">x</thinking>Yes', "Yes"),
    (
        "unclosed at start drops its paragraph",
        "<think>planning\nmore\n\nAnswer\n\nMore",
        "Answer\n\nMore",
    ),
    ("unclosed without blank line drops to end", "Answer\n<think>half a thought", "Answer"),
    ("stray closing tag dropped alone", "Answer</thinking> here", "Answer here"),
    ("mismatched names are not a pair", "<think>a</thinking>\n\nB", "B"),
    ("lookalike kept", "<thinker>kept</thinker>", "<thinker>kept</thinker>"),
    ("self-closing tag dropped alone", "<think/>Answer\n\nMore", "Answer\n\nMore"),
    ("stray inner open closes at first close", "<think>a\n<think>b</think>\nYes", "Yes"),
]

FINAL: list[Case] = [
    ("final keeps inside, drops preamble", "Let me answer.\n<final>Paris</final>\nbye", "Paris"),
    ("final multiline", "<final>\nLine 1\nLine 2\n</final>", "Line 1\nLine 2"),
    ("two final blocks joined", "a<final>One</final>b<final>Two</final>c", "One\n\nTwo"),
    ("unclosed final runs to end", "Preamble <final>The rest", "The rest"),
    ("stray closing final dropped", "Answer</final>", "Answer"),
    (
        "answer unwrapped, surroundings kept",
        "Intro\n<answer>\n42\n</answer>\nOutro",
        "Intro\n42\nOutro",
    ),
    ("response unwrapped", "<response>Hi there</response>", "Hi there"),
    ("unclosed answer kept", "<answer> is a tag", "<answer> is a tag"),
    ("final case-insensitive", "x <FINAL>Y</Final>", "Y"),
    ("self-closing final is a stray tag", "Keep this<final/>", "Keep this"),
    ("nested answer", "<answer><answer>X</answer></answer>", "X"),
]

SYSTEM: list[Case] = [
    ("system message paragraph", "[System Message] You are a bot.\nBe nice.\n\nHello!", "Hello!"),
    ("system short form", "Hi\n\n[System] reminder\n\nBye", "Hi\n\nBye"),
    ("upper case", "[SYSTEM MESSAGE] x\n\nReal", "Real"),
    ("indented marker", "Real\n\n  [system] x", "Real"),
    ("marker mid-paragraph kept", "Note:\n[System] stays", "Note:\n[System] stays"),
    ("marker mid-line kept", "The [System] tag", "The [System] tag"),
]

DUPLICATES: list[Case] = [
    ("two identical paragraphs", "Hello\n\nHello", "Hello"),
    ("three identical, whitespace differs", "Hi there\n\n  Hi there  \n\nHi there\n", "Hi there"),
    ("non-consecutive kept", "A\n\nB\n\nA", "A\n\nB\n\nA"),
    ("consecutive identical lines kept", "ha\nha", "ha\nha"),
    ("identical code blocks collapse", "```\nx\n```\n\n```\nx\n```", "```\nx\n```"),
]

TRIM: list[Case] = [
    ("leading blank lines", "\n\n  \nHello", "Hello"),
    ("keeps indentation of first line", "\n\n    code-ish\nnext", "    code-ish\nnext"),
    ("trailing whitespace", "Hello  \n\n \t", "Hello"),
    ("blank runs collapse", "a\n\n\n\n\nb", "a\n\nb"),
    ("single blank line kept", "a\n\nb", "a\n\nb"),
    ("empty", "", ""),
    ("only whitespace", " \n\t\n", ""),
]

CODE: list[Case] = [
    (
        "fenced xml example untouched",
        'Example:\n```xml\n<function_calls>\n<invoke name="x">\n'
        '<parameter name="a">1</parameter>\n</invoke>\n</function_calls>\n```',
        'Example:\n```xml\n<function_calls>\n<invoke name="x">\n'
        '<parameter name="a">1</parameter>\n</invoke>\n</function_calls>\n```',
    ),
    (
        "tilde fence",
        "~~~\n<think>keep</think>\n[System] keep\n~~~\nok",
        "~~~\n<think>keep</think>\n[System] keep\n~~~\nok",
    ),
    (
        "blank lines and duplicates inside fence kept",
        "```\na\n\n\n\na\n\na\n```",
        "```\na\n\n\n\na\n\na\n```",
    ),
    (
        "json call inside fence kept",
        '```json\n{"tool": "s", "args": {}}\n```',
        '```json\n{"tool": "s", "args": {}}\n```',
    ),
    ("inline code span", 'Use `<invoke name="x">` to call.', 'Use `<invoke name="x">` to call.'),
    ("inline final not a wrapper", "Wrap it in `<final>` tags.", "Wrap it in `<final>` tags."),
    (
        "double-backtick span",
        "Try ``<think>a ` b</think>`` now",
        "Try ``<think>a ` b</think>`` now",
    ),
    (
        "code kept, prose cleaned",
        "<think>x</think>Run `<tool_call>` then:\n```\n<think>y</think>\n```",
        "Run `<tool_call>` then:\n```\n<think>y</think>\n```",
    ),
    (
        "unclosed fence protects to end",
        "Hi <think>a</think>\n```\n<think>b</think>",
        "Hi \n```\n<think>b</think>",
    ),
    ("unbalanced backtick is not code", "a ` <think>x</think> b", "a `  b"),
    ("code inside removed thinking goes too", "<think>`x` and\n```\ny\n```\n</think>Ok", "Ok"),
    ("code inside final kept", "pre\n<final>\n```\n<final>\n```\n</final>", "```\n<final>\n```"),
]

COMBINED: list[Case] = [
    (
        "everything at once",
        "\n\n<thinking>Plan the reply.</thinking>\n"
        "[System Message] You are helpful.\n\n"
        '[Tool call: search({"q": "paris"})]\n'
        '<function_calls><invoke name="search"></invoke></function_calls>\n'
        "<final>\nParis is the capital.\n\nParis is the capital.\n\n"
        "Example: `<think>`\n</final>\nsee you",
        "Paris is the capital.\n\nExample: `<think>`",
    ),
    (
        "removal between duplicates lets them collapse",
        "Hello\n\n<think>x</think>\n\nHello",
        "Hello",
    ),
    (
        "system block between duplicates",
        "Same\n\n[System] echoed\n\nSame\n\nEnd",
        "Same\n\nEnd",
    ),
    ("only tags", "<think></think><tool_call></tool_call></final>", ""),
    ("tag formed by a removal", "<thi<think>x</think>nking>hidden</thinking>Shown", "Shown"),
    ("NO_REPLY survives", "<think>nothing to add</think>\nNO_REPLY", "NO_REPLY"),
]

ALL_CASES = TOOL_XML + TEXT_CALLS + THINKING + FINAL + SYSTEM + DUPLICATES + TRIM + CODE + COMBINED


def _params(cases: list[Case]) -> list[object]:
    return [pytest.param(text, expected, id=name) for name, text, expected in cases]


@pytest.mark.parametrize(("text", "expected"), _params(TOOL_XML))
def test_step1_tool_xml(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(TEXT_CALLS))
def test_step2_text_tool_calls(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(THINKING))
def test_step3_thinking(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(FINAL))
def test_step4_final(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(SYSTEM))
def test_step5_system_blocks(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(DUPLICATES))
def test_step6_duplicates(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(TRIM))
def test_step7_trim(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(CODE))
def test_code_is_protected(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize(("text", "expected"), _params(COMBINED))
def test_combined(text: str, expected: str) -> None:
    assert sanitize(text) == expected


@pytest.mark.parametrize("text", [pytest.param(text, id=name) for name, text, _ in ALL_CASES])
def test_idempotent(text: str) -> None:
    once = sanitize(text)
    assert sanitize(once) == once


def test_removals_leaving_a_line_blank_take_the_line() -> None:
    text = "one\n  <think>a</think> <tool_call>b</tool_call>  \ntwo"
    assert sanitize(text) == "one\ntwo"


def test_degenerate_repetition_is_fast() -> None:
    text = "<answer>" * 10_000 + '<invoke name="x">' * 10_000 + "<think>a " * 10_000
    started = time.perf_counter()
    assert sanitize(text).count("<answer>") == 10_000
    assert time.perf_counter() - started < 5.0


def test_private_use_characters_in_input_survive() -> None:
    text = "\ue000" + "0" + "\ue000 `code` \ue001"
    assert sanitize(text) == text


def test_silent_token_value() -> None:
    assert SILENT_TOKEN == "NO_REPLY"


@pytest.mark.parametrize(
    "text",
    [
        "NO_REPLY",
        "  NO_REPLY \n",
        "`NO_REPLY`",
        "```NO_REPLY```",
        "```\nNO_REPLY\n```",
        "**NO_REPLY**",
        "__NO_REPLY__",
        "*NO_REPLY*",
        "_NO_REPLY_",
        '"NO_REPLY"',
        "'NO_REPLY'",
        "“NO_REPLY”",
        "[NO_REPLY]",
        "NO_REPLY.",
        "**NO_REPLY.**",
        "",
        "   \n\t",
        "<think>nothing to say</think>NO_REPLY",
        "<final>NO_REPLY</final>",
        "<thinking>only thoughts</thinking>",
    ],
)
def test_is_silent_true(text: str) -> None:
    assert is_silent(text) is True
    assert is_silent(sanitize(text), clean=True) is True


@pytest.mark.parametrize(
    "text",
    [
        "I won't say NO_REPLY here",
        "NO_REPLY because nobody asked",
        "Reply: NO_REPLY",
        "NO_REPLY NO_REPLY",
        "NO_REPLYING",
        "no_reply",
        "NOREPLY",
        "`NO_REPLY` is the silent token.",
        "```\nprint('NO_REPLY')\n```",
        "ok",
    ],
)
def test_is_silent_false(text: str) -> None:
    assert is_silent(text) is False
    assert is_silent(sanitize(text), clean=True) is False


_TOKENS = [
    "<function_calls>",
    "</function_calls>",
    '<invoke name="x">',
    "</invoke>",
    '<parameter name="q">',
    "</parameter>",
    "<ns:invoke>",
    "</ns:function_calls>",
    "<tool_use>",
    "</tool_use>",
    "<tool_call>",
    "</tool_call>",
    "<tool_result>",
    "<think>",
    "</think>",
    "<THINKING>",
    "</thinking>",
    "<reasoning>",
    "</reflection>",
    "<final>",
    "</final>",
    "<answer>",
    "</answer>",
    "<response>",
    "</response>",
    "[System Message]",
    "[System]",
    "[Tool call: f({})]",
    "Tool call: f()",
    '{"tool": "t", "args": {}}',
    '{"name": "n", "arguments": {}}',
    "{",
    "}",
    "```",
    "```xml",
    "~~~",
    "`",
    "``",
    "\n",
    "\n\n",
    "\n\n\n",
    " ",
    "\t",
    "NO_REPLY",
    "hello",
    "world",
    "<",
    ">",
    "/",
    "\ue000",
    "0",
    "\\",
    '"',
]


@pytest.mark.slow  # thousands of generated inputs
def test_fuzz_never_raises_and_is_stable() -> None:
    rng = random.Random(20240607)
    for _ in range(1500):
        text = "".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 40)))
        once = sanitize(text)
        assert sanitize(once) == once, repr(text)
        assert once == once.rstrip(), repr(text)
        assert not once.startswith("\n"), repr(text)
        assert isinstance(is_silent(text), bool)
        # on sanitize's output, the check that skips cleaning again agrees
        assert is_silent(once, clean=True) == is_silent(once) == is_silent(text), repr(text)
