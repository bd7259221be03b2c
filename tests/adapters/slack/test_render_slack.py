"""adapters.slack.render: Markdown → Slack mrkdwn chunks."""

from __future__ import annotations

import re

import pytest

from adapters.slack.render import LIMIT, render
from tests.long_reply import make_reply, squash

ZWJ = "\u200d"

CASES: list[tuple[str, str, str]] = [
    ("plain", "hello", "hello"),
    ("bold", "**b**", "*b*"),
    ("italic", "*i* and _j_", "_i_ and _j_"),
    ("strike", "~~s~~", "~s~"),
    ("spoiler is plain", "||secret||", "secret"),
    ("nested", "**a *b***", "*a _b_*"),
    ("code span escaped", "`a<b> && c`", "`a&lt;b&gt; &amp;&amp; c`"),
    ("code span backtick", "`` a`b ``", "`aˋb`"),
    ("text escaped", "1 < 2 && 3 > 2", "1 &lt; 2 &amp;&amp; 3 &gt; 2"),
    ("raw html escaped", "<b>hi</b>", "&lt;b&gt;hi&lt;/b&gt;"),
    (
        "link",
        "[a|b > c & d](https://e.com/?a=1&b=2)",
        "<https://e.com/?a=1&amp;b=2|a∣b &gt; c &amp; d>",
    ),
    ("link text is plain", "[**b** `c`](http://x.y)", "<http://x.y|b c>"),
    ("link url encoded", "[q](https://e.com/a|b>c)", "<https://e.com/a%7Cb%3Ec|q>"),
    ("autolink", "<https://x.org>", "<https://x.org>"),
    ("mailto", "<me@x.org>", "<mailto:me@x.org|me@x.org>"),
    ("relative link", "[docs](/a&b)", "docs (/a&amp;b)"),
    ("image", "![a cat](http://i/c.png)", "<http://i/c.png|a cat>"),
    ("image in link", "[![cat](http://i/c.png)](http://x.y)", "<http://x.y|cat>"),
    ("heading", "# Title & *more*", "*Title &amp; _more_*"),
    ("heading drops inner bold", "## a **b** c", "*a b c*"),
    ("paragraphs", "a\n\nb", "a\n\nb"),
    ("soft break", "a\nb", "a\nb"),
    ("bullets", "- a\n- b", "• a\n• b"),
    ("ordered", "3. a\n4. b", "3. a\n4. b"),
    ("nested list", "- a\n  - b\n- c", "• a\n  ◦ b\n• c"),
    ("quote", "> q *i*\n> r", "> q _i_\n> r"),
    ("quote paragraphs", "> a\n>\n> b", "> a\n> b"),
    ("nested quote is flattened", "> a\n>\n> > b", "> a\n> b"),
    ("quote with list", "> - a\n> - b", "> • a\n> • b"),
    ("code block", "```python\nx < 1 & y\n```", "```\nx &lt; 1 &amp; y\n```"),
    (
        "code keeps indentation",
        "```\ndef f():\n    return 1\n```",
        "```\ndef f():\n    return 1\n```",
    ),
    ("fence inside code", "````\n```\n````", "```\n``\u200b`\n```"),
    ("code not in quote", "> a\n>\n> ```\n> x\n> ```", "> a\n\n```\nx\n```"),
    ("table", "| a | b |\n|---|--:|\n| 1 | 22 |", "```\na |  b\n--+---\n1 | 22\n```"),
    ("hr", "a\n\n---", "a\n\n———"),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_render(markdown: str, expected: str) -> None:
    assert render(markdown) == [expected]


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n"])
def test_empty(markdown: str) -> None:
    assert render(markdown) == []


MENTIONS: list[tuple[str, str, str]] = [
    (
        "special mentions escaped",
        "<!channel> <!here> <!everyone>",
        "&lt;!channel&gt; &lt;!here&gt; &lt;!everyone&gt;",
    ),
    (
        "user and channel",
        "hi <@U123> in <#C42|general>",
        "hi &lt;@U123&gt; in &lt;#C42|general&gt;",
    ),
    ("bare broadcasts", "@channel @here @everyone", f"@{ZWJ}channel @{ZWJ}here @{ZWJ}everyone"),
    ("bare broadcasts any case", "@Channel, @HERE!", f"@{ZWJ}Channel, @{ZWJ}HERE!"),
    ("other words untouched", "@channels @hereby @bob", "@channels @hereby @bob"),
    ("in bold", "**@here**", f"*@{ZWJ}here*"),
    ("in code span", "`@channel <!here>`", f"`@{ZWJ}channel &lt;!here&gt;`"),
    ("in code block", "```\n@everyone <@U1>\n```", f"```\n@{ZWJ}everyone &lt;@U1&gt;\n```"),
    ("in link text", "[@here](http://x.y)", f"<http://x.y|@{ZWJ}here>"),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in MENTIONS], ids=[c[0] for c in MENTIONS]
)
def test_mentions_never_ping(markdown: str, expected: str) -> None:
    (chunk,) = render(markdown)
    assert chunk == expected
    assert not re.search(r"<[!@#]", chunk)
    assert not re.search(r"@(channel|here|everyone)\b", chunk, re.IGNORECASE)


def test_deterministic() -> None:
    reply, _, _ = make_reply(WORDS)
    assert render(reply) == render(reply)


# -------------------------------------------------------------- a long reply

WORDS = ("tea&cake", "<tag>", "@here")


def unescape(text: str) -> str:
    return (
        text.replace("@" + ZWJ, "@").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


FENCE = re.compile(r"```\n(.*?)\n```", re.S)


def test_long_reply() -> None:
    reply, expected, codes = make_reply(WORDS)
    assert len(reply) > 10_000
    chunks = render(reply)
    assert len(chunks) >= 4
    for chunk in chunks:
        assert 0 < len(chunk) <= LIMIT
        assert chunk.count("```") % 2 == 0, chunk  # fences balanced
        assert not re.search(r"&(?!(?:amp|lt|gt);)", chunk)  # no cut or bare entity
        assert "<" not in chunk and ">" not in chunk  # no links here: all text escaped
        assert not re.search(r"@here\b", chunk)
    bodies = [unescape(m) for c in chunks for m in FENCE.findall(c)]
    assert len(bodies) > len(codes)  # the long code block became several fences
    assert "\n".join(bodies) == "\n".join(codes)  # split at line ends, nothing lost
    visible = unescape("".join(FENCE.sub(r"\1", c) for c in chunks)).replace("*", "")
    assert squash(visible) == squash(expected)
    bold_chunks = [c for c in chunks if re.search(r"(^|\s)\*\S", c)]
    assert len(bold_chunks) >= 2  # the long bold run was closed and reopened


def test_long_link_text_is_split_into_valid_links() -> None:
    label = " ".join(["word"] * 1500)
    chunks = render(f"[{label}](https://example.com/x)")
    assert len(chunks) == 2
    for chunk in chunks:
        assert len(chunk) <= LIMIT
        assert re.fullmatch(r"<https://example\.com/x\|[a-z ]+>", chunk)
